"""Crammed BERT: pretrain a BERT-class encoder on one GPU under a fixed budget."""

from pathlib import Path

from cramming.library_noise import quiet_torchao_without_cuda

quiet_torchao_without_cuda()

__version__ = "0.1.0"

# The Hydra configs: inside an installed wheel they are the package's `configs/`; in a checkout (and an
# editable install) they stay at the top level of the repository.
_PACKAGED_CONFIGS = Path(__file__).resolve().parent / "configs"
CONFIG_DIR = _PACKAGED_CONFIGS if _PACKAGED_CONFIGS.is_dir() else Path(__file__).resolve().parents[1] / "configs"
