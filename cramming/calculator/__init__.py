"""Budget calculator: which encoder shape makes the best use of a GPU and a number of hours.

speed_model: FLOP/s of a shape on a profile, its fit and stored constants; timing and measure: the
timed training steps behind `fit` and `check`; loss_model: loss against compute from the user's runs
and the compute-optimal size rule; candidates: the shapes, their tokens, FLOPs and loss, ranked;
report: table, JSON and plot; config: the typed schema of configs/calculator.yaml.
"""
