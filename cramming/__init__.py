"""Crammed BERT: pretrain a BERT-class encoder on one GPU under a fixed budget."""

from pathlib import Path

from cramming.library_noise import quiet_torchao

quiet_torchao()

__version__ = "0.1.0"

# The Hydra configs: inside an installed wheel they are the package's `configs/`; in a checkout (and an
# editable install) they stay at the top level of the repository.
_PACKAGED_CONFIGS = Path(__file__).resolve().parent / "configs"
CONFIG_DIR = _PACKAGED_CONFIGS if _PACKAGED_CONFIGS.is_dir() else Path(__file__).resolve().parents[1] / "configs"


# A key that names a file of a config group: `train.optim.name=lion` means the choice `optim=lion`
# (configs/optim/lion.yaml: the optimizer's name and its defaults), so both spellings compose the same config.
CHOOSING_KEYS = {"train.optim.name": "optim"}


def as_group_choices(overrides: list[str]) -> list[str]:
    """Each `train.optim.name=<option>` (or a sweep of options, `a,b`) as the group choice it means; any other
    override, an unknown option included (the config's check names it), as it is."""
    chosen = []
    for override in overrides:
        key, sep, value = override.partition("=")
        group = CHOOSING_KEYS.get(key)
        if group and sep and value and all((CONFIG_DIR / group / f"{option}.yaml").is_file()
                                           for option in value.split(",")):
            override = f"{group}={value}"
        chosen.append(override)
    return chosen


def quoted_override(key: str, value) -> str:
    """key='value', quoted for Hydra's grammar: a glob's brackets (shards/train-00[01].txt.gz), a path's commas."""
    escaped = str(value).replace("'", "\\'")
    return f"{key}='{escaped}'"


def compose_config(config_name: str, overrides: list[str]):
    """The command config `config_name` composed from configs/ with `overrides`, for library code that runs
    other commands' work (the GPU check runs the benchmark, pretraining and GLUE; the golden runs compose
    pretraining). Inside a running Hydra app the global Hydra already holds configs/ and initializing it
    again fails ("GlobalHydra is already initialized"); outside one it is initialized for the call."""
    from hydra import compose, initialize_config_dir  # noqa: PLC0415 -- `import cramming` does not pay for Hydra
    from hydra.core.global_hydra import GlobalHydra  # noqa: PLC0415 -- as above

    overrides = as_group_choices(overrides)
    if GlobalHydra.instance().is_initialized():
        return compose(config_name, overrides=overrides)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name, overrides=overrides)
