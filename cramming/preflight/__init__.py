"""A pretraining run before it starts: `checks` (every problem a run would meet, in one pass: check_run) and
`plan` (preflight=true: the trial microbatch and the plan of the run)."""
