"""`pretrain.py resume=...`: the run goes on with its own config. The checkpoint is found and the run's
config.yaml read before any data is prepared; the command line may change only what a resume may change
(MAY_CHANGE), and a finished run goes on only when the command line extends it on purpose."""

import copy
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from cramming import CHOOSING_KEYS
from cramming.cli.overrides import key_of
from cramming.errors import CrammingError
from cramming.model.checkpoint import read_config
from cramming.pretraining import PretrainConfig
from cramming.train.resume import check_resumed_model, load_state
from cramming.train.runs import CONFIG_FILE, FINAL, check_run_name, differences, resolve_checkpoint, run_config, run_of

log = logging.getLogger("pretrain")

# The keys (with everything under them) a resume may set; every other key keeps the run's value
# (docs/training.md#resume).
MAY_CHANGE = (
    "budget", "train.max_steps",  # a larger one extends the run, on purpose
    "train.optim.lr", "train.max_nonfinite_steps", "train.check_nonfinite_every",  # going on after a divergence
    "output_dir", "name", "cache_dir", "data.files",  # where the run, the prepared data and moved files are
    "logging", "wandb", "checkpoint", "impl.num_workers", "eval",  # how the run is watched, saved, fed, scored
)
EXTENDS = ("budget", "train.max_steps")


class RunFinished(CrammingError):
    """The run to resume has finished and the command line does not extend it: nothing to do."""

    exit_code = 0
    label = "finished"


def may_change(key: str) -> bool:
    return any(key == allowed or key.startswith(f"{allowed}.") for allowed in MAY_CHANGE)


def resumed_config(cfg: DictConfig, overrides: list[str], config_name: str, world_size: int | None) -> DictConfig:
    """The config `resume=` trains with: the run's own (the last one in its config.yaml) with the command line's
    changes that MAY_CHANGE allows; resume names the checkpoint found. A checkpoint outside a run directory
    has no config to go on with: the command line's config is used, and the checkpoint must match it.
    world_size: the processes that will train (None: unknown here), which must be the checkpoint's."""
    chosen_by = {group: key for key, group in CHOOSING_KEYS.items()}  # optim=lion sets train.optim.name
    given = {chosen_by.get(key_of(override), key_of(override)): override for override in overrides
             if key_of(override) != "resume"}
    if "name" in given:  # the folder a new run directory gets; without it, the run's own folder, as it is
        check_run_name(cfg.name)
    spec = cfg.resume
    checkpoint = resolve_checkpoint(spec, _latest_root(cfg, given, config_name), key="resume", need_state=True)
    fingerprint = load_state(checkpoint)["fingerprint"]
    trained_as = fingerprint.get("world_size", 1)
    if world_size is not None and world_size != trained_as:
        how = ("as one process (python pretrain.py, no torchrun)" if trained_as == 1 else
               f"as {trained_as} (python scripts/launch.py --nproc_per_node={trained_as} pretrain.py ...)")
        raise CrammingError(f"resume={spec}: the run trained as {trained_as} process(es) and this is {world_size}; "
                            f"a resume keeps that number (each process reads its own slice of every batch): run it "
                            f"{how}")
    run_dir = run_of(checkpoint)
    if run_dir is None or not (run_dir / CONFIG_FILE).is_file():
        log.warning("resume=%s: no %s beside %s: the command line's config is the run's", spec, CONFIG_FILE,
                    checkpoint)
        cfg.resume = str(checkpoint)
        return cfg
    run = _typed(run_config(run_dir), run_dir / CONFIG_FILE, spec)
    command_line = copy.deepcopy(cfg)
    for key, override in sorted(given.items()):
        if may_change(key):
            continue
        changed = [(k, before, now) for k, before, now in differences(_value(run, key), _value(command_line, key))
                   if not k or not (may_change(f"{key}.{k}") or f"{key}.{k}" in given)]  # those: checked alone
        if changed:
            where, before, now = changed[0]
            more = f" and {len(changed) - 1} more key(s) of {key}" if len(changed) > 1 else ""
            raise CrammingError(
                f"resume={spec}: {override} changes {f'{key}.{where}' if where else key} ({before} in the run's "
                f"{CONFIG_FILE}, {now} here){more}; a resume goes on with the run's config and may change only "
                f"{', '.join(MAY_CHANGE)}: start a new run to change anything else")
    updates = {key: _value(command_line, key) for key in given if may_change(key)}
    if checkpoint.name == FINAL and not any(_larger(updates.get(key), _value(run, key)) for key in EXTENDS):
        steps = f" or train.max_steps (now {run.train.max_steps})" if run.train.max_steps else ""
        raise RunFinished(f"resume={spec}: {run_dir} has finished (checkpoint {checkpoint}); to train it further "
                          f"on purpose, resume it with a larger budget (now {run.budget}){steps}")
    for key, value in updates.items():
        if value != _value(run, key):
            log.info("resume: %s=%s from the command line (the run had %s)", key, value, _value(run, key))
        OmegaConf.update(run, key, OmegaConf.select(command_line, key), merge=False)  # a section keeps its type
    if "output_dir" not in given:  # the run goes on in its own directory, wherever it is now
        run.output_dir = str(run_dir.parent.parent)
        run.name = run.name if "name" in given else run_dir.parent.name
    run.cache_dir = command_line.cache_dir  # this machine's prepared data
    run.resume = str(checkpoint)
    # the model the run's config.yaml describes is the one the checkpoint trained and its weights hold (an edited
    # config.yaml or trainer state is said as such now, before the start's checks judge a model not the checkpoint's)
    check_resumed_model(checkpoint, {"fingerprint": fingerprint}, run, read_config(checkpoint)[0]["vocab_size"])
    return run


def _latest_root(cfg: DictConfig, given: dict, config_name: str) -> Path:
    """resume=latest: the newest run under output_dir, or the newest of `name` when the command line or its
    --config-name (the quick start's is `quickstart`) gives one."""
    named = "name" in given or config_name != "pretrain"
    return Path(cfg.output_dir) / cfg.name if named else Path(cfg.output_dir)


def _typed(saved: DictConfig, path: Path, spec: str) -> DictConfig:
    try:
        return OmegaConf.merge(OmegaConf.structured(PretrainConfig), saved)
    except OmegaConfBaseException as error:
        raise CrammingError(f"resume={spec}: {path} does not fit this version's config "
                            f"({str(error).splitlines()[0]})") from None


def _value(cfg: DictConfig, key: str):
    value = OmegaConf.select(cfg, key)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _larger(new, old) -> bool:
    return new is not None and old is not None and new > old
