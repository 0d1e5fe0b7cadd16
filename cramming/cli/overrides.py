"""One job's overrides (cramming.cli.arguments reads them) checked before Hydra runs a command: an unknown
key, a group the command does not have (cramming.cli.groups), an unknown choice or a value of the wrong type
is one line that names it (and the closest valid key, choice or override), instead of Hydra's many-line
report."""

import difflib
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cramming import CONFIG_DIR
from cramming.cli.arguments import parse_override
from cramming.cli.groups import commands_with, config_groups, group_options, script
from cramming.errors import CrammingError
from cramming.files import check_directory


def flat_keys(tree: Any, prefix: str = "") -> list[str]:
    if not isinstance(tree, dict):
        return [prefix]
    return [key for name, value in tree.items() for key in flat_keys(value, f"{prefix}.{name}" if prefix else name)]


# Names other frameworks give our keys, which spelling similarity alone would not find.
SYNONYMS = {"learning_rate": "lr", "epsilon": "eps", "wd": "weight_decay", "optimizer": "name", "beta": "betas"}


def closest(word: str, candidates: list[str]) -> str:
    """The valid key meant: a synonym's, else the key of the same name in another section (train.microbatch_size
    is impl.microbatch_size), else the nearest spelling."""
    parent, _, last = word.rpartition(".")
    synonym = f"{parent}.{SYNONYMS[last]}" if parent and last in SYNONYMS else SYNONYMS.get(last)
    same_name = [key for key in candidates if key.rpartition(".")[2] == last]
    match = ([synonym] if synonym in candidates else difflib.get_close_matches(word, same_name, n=1, cutoff=0)
             or difflib.get_close_matches(word, candidates, n=1, cutoff=0.6))
    return f" — did you mean {match[0]}?" if match else ""


def key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def check_group_overrides(config_name: str, overrides: list[str], reads_checkpoint: bool) -> None:
    """Each override of a folder of configs/ names one of the command's groups and one of its options
    (`~group` removes one); CrammingError otherwise, with the closest real override."""
    groups = config_groups(config_name)
    for override in overrides:
        parsed = parse_override(override)
        group = parsed.key_or_group
        if group.split("/")[0] == "hydra" or not (CONFIG_DIR / group).is_dir():  # hydra/...: Hydra's own
            continue
        value = parsed.value()
        choice = value if isinstance(value, str) or value is None else override.partition("=")[2]
        if group not in groups:
            raise CrammingError(_not_a_group(override, group, choice, config_name, groups, reads_checkpoint))
        if parsed.is_add():
            raise CrammingError(f"{override}: {group} is a group of {script(config_name)} already; choose with "
                                f"{group}={choice}")
        options = group_options(group)
        if choice is None and not parsed.is_delete():
            raise CrammingError(f"{override}: leave a group out with ~{group}, or choose one of {', '.join(options)}")
        if choice is not None and choice not in options:
            raise CrammingError(f"unknown {group}={choice}; choose one of {', '.join(options)}"
                                f"{closest(choice, options)}")


def _not_a_group(override: str, group: str, choice: str, config_name: str, groups: list[str],
                 reads_checkpoint: bool) -> str:
    has = f"its groups: {', '.join(groups)}" if groups else "it has none"
    line = f"{override}: {script(config_name)} has no config group {group} ({has})"
    if reads_checkpoint and group in config_groups("pretrain"):
        line += "; here the model is the checkpoint's (ckpt=)"
    others = [script(command) for command in commands_with(group)]
    return f"{line}; {group} is a group of {' and '.join(others)}: python {others[0]} {group}={choice}" if others \
        else line


def check_overrides(config_name: str, overrides: list[str], schema: type, directories: tuple[str, ...] = ()) -> None:
    """Compose the config as Hydra will and check it against the command's schema, and that the
    `directories` keys name directories it can write; CrammingError if not.

    Every key already has its place in the schema, so `+key=value` can only add an unknown key: refused.
    """
    check_group_overrides(config_name, overrides, "ckpt" in getattr(schema, "__dataclass_fields__", {}))
    groups = [o for o in overrides if (CONFIG_DIR / key_of(o)).is_dir()]  # arch=..., data=..., eval=glue
    added = [o for o in overrides if o.startswith("+") and o not in groups]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            composed = compose(config_name, overrides=[o for o in overrides if o not in added])
            OmegaConf.merge(OmegaConf.structured(schema), composed)
            keys = flat_keys(OmegaConf.to_container(composed))
            unknown = next((key_of(o) for o in added if key_of(o) not in keys), None)
            if unknown is None:
                for key in directories:
                    if OmegaConf.select(composed, key) is not None:
                        check_directory(OmegaConf.select(composed, key), key)
                return
            message = f"unknown key {unknown}{closest(unknown, keys)}"
        except MissingConfigException as error:  # --config-name of no config
            message = str(error).splitlines()[0]
        except AssertionError:  # Hydra's, for a key under a group the config leaves null (eval.lr without eval=)
            message = _under_a_null_group(compose(config_name, overrides=groups), overrides)
        except (ConfigCompositionException, OmegaConfBaseException) as error:
            if str(error).startswith("You must specify"):  # a group with no default: "... 'sweep', e.g, sweep=<OPTION>"
                raise CrammingError(str(error).splitlines()[0]) from None
            cause = error.__cause__ if isinstance(error, ConfigCompositionException) and error.__cause__ else error
            keys = flat_keys(OmegaConf.to_container(compose(config_name, overrides=groups)))
            message = _explain(cause, keys, overrides)
    raise CrammingError(message)


def _under_a_null_group(composed, overrides: list[str]) -> str:
    """The override that sets a key under a group left null (eval.lr=1 without eval=glue): what to add."""
    for override in overrides:
        parts = key_of(override).split(".")
        for depth in range(1, len(parts)):
            group = ".".join(parts[:depth])
            if OmegaConf.select(composed, group, default="") is None:
                choices = group_options(group) if (CONFIG_DIR / group).is_dir() else []
                choose = f"choose it first, e.g. {group}={choices[0]} {override}" if choices else f"set {group} first"
                return f"{override}: {group} is null in this config, so it has no {parts[depth]}; {choose}"
    return "an override sets a key under a section the config leaves null"


def _explain(cause: Exception, keys: list[str], overrides: list[str]) -> str:
    full_key = getattr(cause, "full_key", None) or ""
    first_line = str(cause).splitlines()[0]
    if "not in" in first_line or "not in struct" in first_line or "Could not override" in first_line:
        key = next((key_of(o) for o in reversed(overrides) if full_key and full_key in key_of(o)), full_key)
        return f"unknown key {key}{closest(key, keys)}"
    given = next((o for o in reversed(overrides) if full_key and key_of(o) == full_key), None)
    return f"{given or full_key}: {first_line}" if (given or full_key) else first_line
