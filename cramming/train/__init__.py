"""Budget-clocked pretraining: clock, schedules, optimizer, checkpoints, metrics and the training loop."""
