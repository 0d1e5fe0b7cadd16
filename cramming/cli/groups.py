"""The config groups a command has — the groups of the defaults list in configs/<command>.yaml — and the
options each offers (its YAML files; a typed `schema` is not an option): what an override may select
(cramming.cli.overrides) and what `--help` lists (configs/hydra/help/cramming.yaml)."""

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from cramming import CONFIG_DIR, compose_config
from cramming.train.runs import flatten

ROOT_SCRIPTS = ("pretrain", "eval_glue")  # the others are scripts/<command>.py
SHOWN_KEYS = 4  # of the keys a replaced group choice changes


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


def own_choices(config_name: str) -> dict[str, str]:
    """The groups a config extending another chooses itself (quickstart's `override train: quick`)."""
    return {entry.split(" ", 1)[1]: choice for item in _defaults(config_name) if isinstance(item, dict)
            for entry, choice in item.items() if entry.startswith("override ") and "/" not in entry}


def replaced_choices(config_name: str, overrides: list[str]) -> list[str]:
    """A line for each group the command line chooses over the config's own choice, naming the keys that the
    change brings back unasked (`--config-name quickstart train=steps` restores the recipe's 8192-sequence batch
    ramp in place of quick's 256), so that a choice meant to add one setting does not silently undo others."""
    own, notices = own_choices(config_name), []
    set_here = {override.partition("=")[0] for override in overrides}
    for override in overrides:
        group, _, choice = override.partition("=")
        if group not in own or choice in ("", own[group]):
            continue
        restored = [o for o in overrides if o != override] + [f"{group}={own[group]}"]
        given, kept = (flatten(OmegaConf.to_container(compose_config(config_name, o)[group], resolve=True), group)
                       for o in (overrides, restored))
        changed = [(key, kept.get(key), value) for key, value in given.items()
                   if value != kept.get(key) and key not in set_here and key != f"{group}.name"]
        if changed:
            shown = ", ".join(f"{key} {before} -> {after}" for key, before, after in changed[:SHOWN_KEYS])
            more = f" and {len(changed) - SHOWN_KEYS} more" if len(changed) > SHOWN_KEYS else ""
            notices.append(f"{override} replaces {config_name}'s {group}={own[group]}: {shown}{more}; to keep "
                           f"{group}={own[group]}, set keys instead (e.g. {changed[0][0]}={changed[0][2]})")
    return notices


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
