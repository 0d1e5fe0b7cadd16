"""A command's config composed by name from configs/, for library code that runs other commands' work
(the GPU check runs the benchmark, pretraining and GLUE; the golden runs compose pretraining).

Inside a running Hydra app the global Hydra already holds configs/ on its search path, and initializing
it again fails ("GlobalHydra is already initialized"); outside one it must be initialized first.
"""

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from cramming import CONFIG_DIR


def compose_config(config_name: str, overrides: list[str]):
    """The composed config `config_name` with `overrides`, inside a Hydra app or outside one."""
    if GlobalHydra.instance().is_initialized():
        return compose(config_name, overrides=overrides)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name, overrides=overrides)
