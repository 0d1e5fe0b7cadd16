"""Equal-budget ablation sweeps (scripts/ablate.py)."""
