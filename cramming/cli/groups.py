"""The config groups a command has — the groups of the defaults list in configs/<command>.yaml — and the
options each offers (its YAML files; a typed `schema` is not an option): what an override may select
(cramming.cli.overrides) and what `--help` lists (configs/hydra/help/cramming.yaml)."""

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from cramming import CONFIG_DIR

ROOT_SCRIPTS = ("pretrain", "eval_glue")  # the others are scripts/<command>.py


def _defaults(config_name: str) -> list:
    path = CONFIG_DIR / f"{config_name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}).get("defaults", []) if path.is_file() else []


def _extends(entry) -> bool:
    """A defaults entry naming another command's config (quickstart's `- pretrain`), not a group."""
    return isinstance(entry, str) and (CONFIG_DIR / f"{entry}.yaml").is_file()


def config_groups(config_name: str) -> list[str]:
    """The groups of the command's defaults list, with those of a config it extends, in order."""
    groups = []
    for entry in _defaults(config_name):
        if _extends(entry):
            groups += config_groups(entry)
        elif isinstance(entry, dict):
            groups += [group for group in entry if not group.startswith(("override ", "hydra/"))]
    return list(dict.fromkeys(groups))


def group_options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml"))


def script(config_name: str) -> str:
    """The command whose config this is (a config extending another is that command's: quickstart, pretrain)."""
    extended = next((entry for entry in _defaults(config_name) if _extends(entry)), None)
    if extended is not None:
        return script(extended)
    return f"{config_name}.py" if config_name in ROOT_SCRIPTS else f"scripts/{config_name}.py"


def commands_with(group: str) -> list[str]:
    """The commands (config names) that have `group`; a config extending another counts as that one."""
    commands = sorted((path.stem for path in CONFIG_DIR.glob("*.yaml")
                       if not any(_extends(entry) for entry in _defaults(path.stem))),
                      key=lambda name: (name not in ROOT_SCRIPTS, name))  # pretrain.py first
    return [command for command in commands if group in config_groups(command)]


def help_groups() -> str:
    """--help's list of the running command's groups and their options (configs/hydra/help/cramming.yaml)."""
    groups = config_groups(HydraConfig.get().job.config_name)
    lines = [f"{group}: {', '.join(group_options(group))}" for group in groups]
    return "\n".join(lines) if lines else "(none: every setting is a key of the config below)"


OmegaConf.register_new_resolver("command_groups", help_groups, replace=True)
