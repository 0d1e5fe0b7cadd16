"""Timing training steps: the shared timed step (timing.py) behind the calculator's speed fit and check,
and the side-by-side benchmark against transformers' BertForMaskedLM (benchmark.py)."""
