"""The engine every trainer shares: one training step (step.py) under a precision policy (precision.py), on the
device every command resolves (device.py), with the optimizer builder (adamw.py) and the schedules (schedules.py).
Pretraining (cramming.train), GLUE fine-tuning (cramming.eval) and the benchmark (cramming.bench) all run it."""
