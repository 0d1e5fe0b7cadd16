"""A pretraining run checked whole before any data, device or output work.

`check_run` is one pass over the composed config and over what the run will ask of the machine: every section's
values, the folders it writes in, the environment's CRAMMING_SIMULATED_MICROBATCH_SECONDS, the device, the budget
and its scaling, the W&B login, the techniques' inputs on disk (a teacher, a ticket), the data the run will prepare
(its files and first records: cramming.data.first_look), the end-of-run evaluation by the code that will run it
(cramming.eval.start, and its tasks' files), and the disk for the prepared data and the checkpoints. It lists every
problem it finds, not only the first (a check that reads parts of the config runs where those parts hold).
pretrain.py runs it before anything else, as do each job of a -m sweep before the first trains, scripts/ablate.py
for every run of a sweep, and scripts/launch.py before torchrun starts a process. One concept, the check of a run
before it starts, kept whole so that everything it checks is listed in one file.
"""

import dataclasses
import logging
import netrc
import os
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import torch
from omegaconf import OmegaConf

from cramming.data import store
from cramming.data.first_look import data_problems
from cramming.data.prepare import dataset_folder, first_look_before_preparing
from cramming.data.sources import source_from_config
from cramming.engine.hardware import budget_seconds
from cramming.errors import CrammingError, problems_of, raise_problems, size_text
from cramming.eval.start import check_glue_after_pretraining
from cramming.eval.tasks.registry import as_glue_config, requested_tasks
from cramming.files import check_directory
from cramming.model import build_mlm_model
from cramming.model.config import as_model_config
from cramming.model.shapes import shapes_only
from cramming.pretraining import PretrainConfig
from cramming.train.optimizers import OPTIMIZERS
from cramming.train.settings import device_profile, device_type, resolve_settings
from cramming.train.stopping import simulated_microbatch_seconds
from cramming.train.techniques import check_on_device, check_technique_inputs

log = logging.getLogger("pretrain")

BYTES_PER_TOKEN = 2  # the prepared dataset stores uint16 token ids
CHARACTERS_PER_TOKEN = 4  # English text with a 32k WordPiece or BPE vocabulary: about 4 to 4.7
HUB_OFFLINE = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


def run_problems(cfg, skipped: dict[str, str] | None = None) -> list[str]:
    """Every problem a run of `cfg` would meet that can be known before it starts, one line each: the config's values,
    the folders it writes in, the environment, W&B, the end-of-run evaluation, and each check that reads parts of
    the config (the device and the budget, the techniques' inputs, the data, the disk) where those parts hold.
    `skipped`, where given, receives what the end of the run will leave out as eval.skip_missing allows."""
    skipped = {} if skipped is None else skipped
    main = int(os.environ.get("RANK", "0")) == 0  # only rank 0 runs GLUE at the end and writes to disk
    parts = config_part_problems(cfg)
    parts |= {key: problems_of(lambda key=key: check_directory(getattr(cfg, key), key)) for key in FOLDERS}

    def holds(*names: str) -> bool:  # a check that reads a part with problems would only repeat them
        return not any(parts[name] for name in names)

    checks = [(simulated_microbatch_seconds, True),
              (lambda: check_wandb(cfg.wandb), holds("wandb")),
              (lambda: skipped.update(check_glue_data(cfg.eval)), main),
              (lambda: check_end_of_run(cfg), main and holds("arch", "data")),
              (lambda: device_and_budget(cfg), holds("budget", "impl", "train", "techniques")),
              (lambda: check_memory(cfg), holds("arch", "data", "train")),
              (lambda: check_technique_inputs(cfg), holds("techniques", "data", "arch")),
              (lambda: look_at_data(cfg), main and holds("data", "cache_dir")),
              (lambda: check_disk(disk_needs(cfg)), main and holds("data", "arch", "train", "checkpoint", *FOLDERS))]
    found = [problem for problems in parts.values() for problem in problems]
    return list(dict.fromkeys(found + problems_of(*[check for check, runs in checks if runs])))


FOLDERS = ("output_dir", "cache_dir")  # what a run writes in


def config_part_problems(cfg) -> dict[str, list[str]]:
    """The problems of each part of the composed config (cramming.pretraining.PretrainConfig.part_problems)."""
    return (cfg if isinstance(cfg, PretrainConfig) else OmegaConf.to_object(cfg)).part_problems()


def look_at_data(cfg, hub: bool = False) -> list[str]:
    """Data the run will prepare, judged before it is (cramming.data.first_look): its files and what the
    filters and the vocabulary keep of its first records; with hub=True (preflight) also a hub corpus's or a
    pretrained tokenizer's, which only the network tells. Returns what could not be judged."""
    data = OmegaConf.to_object(cfg.data) if OmegaConf.is_config(cfg.data) else cfg.data
    source = source_from_config(data)
    if source.name == "hub" or data.tokenizer.kind == "pretrained":
        if not hub:
            return []
        try:
            look = data_problems(data, source)
        except CrammingError:
            raise
        except Exception as error:  # the hub unreachable: the library's own words
            raise CrammingError(f"data: the source's first records could not be read ({type(error).__name__}: "
                                f"{str(error).splitlines()[0] if str(error) else ''})") from None
        beyond = [] if look.whole_source else ["the hub corpus beyond its first records: read as it is prepared"]
        return [*look.notes, *beyond]
    look = first_look_before_preparing(data, str(cfg.cache_dir))
    return [] if look is None else look.notes


def check_run(cfg) -> None:
    """run_problems as one error line (exit 2) naming them all."""
    raise_problems(run_problems(cfg))


def device_and_budget(cfg):
    """The device the profile names, its precision, the techniques that need a device, and the wall budget
    (budget_scaling=peak needs the peak FLOP/s of the profile and of the device)."""
    settings = resolve_settings(cfg, int(os.environ.get("LOCAL_RANK", "0")))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    check_on_device(cfg, settings.device, settings.compile, settings.precision.name, world_size)
    seconds = budget_seconds(cfg.budget, cfg.budget_scaling, settings.profile, device_profile(settings)) / world_size
    return settings, seconds


def check_wandb(wandb) -> None:
    """wandb=online needs an API key (WANDB_API_KEY, or `wandb login`'s entry in ~/.netrc) and, with
    wandb.if_unreachable=error, W&B's server within reach: found now, not when W&B starts after the data is
    prepared (with if_unreachable=offline an unreachable server is the start's to say: offline_if_unreachable)."""
    if wandb.mode != "online":
        return
    host = wandb_host()
    if not os.environ.get("WANDB_API_KEY"):
        try:
            entry = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
        except (OSError, netrc.NetrcParseError):
            entry = None
        if not entry or not entry[2]:
            raise CrammingError(f"wandb=online: no W&B API key (no WANDB_API_KEY, no {host} entry in ~/.netrc): run "
                                "`wandb login` first, or use wandb=offline and `wandb sync` later")
    if wandb.if_unreachable == "error" and (why := wandb_unreachable()):
        raise CrammingError(f"wandb=online: {host} cannot be reached ({why}) and wandb.if_unreachable=error: check "
                            "the network, or log offline (wandb=offline, or wandb.if_unreachable=offline) and "
                            "`wandb sync` later")


WANDB_URL = "https://api.wandb.ai"  # WANDB_BASE_URL replaces it, as for wandb itself
WANDB_PROBE_SECONDS = 3.0


def wandb_host() -> str:
    return urlparse(os.environ.get("WANDB_BASE_URL", WANDB_URL)).hostname


def wandb_unreachable() -> str | None:
    """Why W&B's server does not answer a request now (None: it answers, whatever its status), in at most
    WANDB_PROBE_SECONDS, the name's lookup included: a run that logs online learns it before its data is prepared,
    not hours later when W&B starts."""
    url, outcome = os.environ.get("WANDB_BASE_URL", WANDB_URL), []

    def request() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=WANDB_PROBE_SECONDS).close()
            outcome.append(None)
        except urllib.error.HTTPError:  # an answer, whatever it says
            outcome.append(None)
        except (urllib.error.URLError, OSError, ValueError) as error:
            outcome.append(str(getattr(error, "reason", error)))

    probe = threading.Thread(target=request, name="wandb-probe", daemon=True)  # a name lookup ignores timeouts
    probe.start()
    probe.join(WANDB_PROBE_SECONDS)
    return outcome[0] if outcome else f"no answer within {WANDB_PROBE_SECONDS:g} s"


def wandb_fallback(cfg) -> str | None:
    """Why a run of `cfg` would log to W&B offline though wandb=online: its server out of reach now, and
    wandb.if_unreachable=offline (the default); None where it logs as set."""
    online = cfg.wandb.mode == "online" and cfg.wandb.if_unreachable == "offline"
    return wandb_unreachable() if online else None


def offline_if_unreachable(cfg) -> None:
    """On rank 0, which logs to W&B: where wandb_fallback says so, the run logs offline from its start, and says
    it before any data is prepared (its config.yaml records wandb.mode=offline)."""
    if int(os.environ.get("RANK", "0")) == 0 and (why := wandb_fallback(cfg)):
        cfg.wandb.mode = "offline"
        log.warning("wandb=online: %s cannot be reached (%s): this run logs to W&B offline, in <run>/wandb/ (`wandb "
                    "sync <run>/wandb/offline-run-*` uploads it later; wandb.if_unreachable=error stops instead)",
                    wandb_host(), why)


def check_end_of_run(cfg) -> None:
    """eval=glue: every key the end-of-run evaluation reads, by the code that will read it (its device and
    precision on this machine, LoRA's layers and eval.max_length against the model `arch` builds, the baseline
    file)."""
    if cfg.eval is not None:
        check_glue_after_pretraining(as_glue_config(cfg.eval), cfg.arch, cfg.data.tokenizer.vocab_size)


def check_glue_data(eval_cfg, folder_key: str = "eval.data_dir") -> dict[str, str]:
    """eval=glue: the tasks' files read now from eval.data_dir (a file that would stop the end of the run stops
    its start; what has no data is refused, or with eval.skip_missing=true said now and skipped then: returned as
    {what: why}), or downloads allowed where it is null."""
    if eval_cfg is None:
        return {}
    from cramming.eval.run import load_task_data  # noqa: PLC0415 -- transformers: pretrain.py starts without it

    cfg = as_glue_config(eval_cfg)
    tasks = requested_tasks(cfg)
    if cfg.data_dir is None:
        offline = [name for name in HUB_OFFLINE if os.environ.get(name, "") not in ("", "0")]
        if offline:
            raise CrammingError(f"{folder_key} is null, so {', '.join(cfg.tasks)} would be downloaded from the hub, "
                                f"and {offline[0]}={os.environ[offline[0]]} forbids it: give {folder_key}=<a folder "
                                "of the tasks' files> (docs/glue.md)")
        return {}
    return load_task_data(tasks, cfg)[2]


@dataclasses.dataclass
class DiskNeed:
    what: str  # e.g. "4 checkpoints of 1.44 GB"
    where: Path
    bytes: int | None  # None: not known before the data is read
    tokens: float | None = None  # the prepared dataset's tokens (estimated where it is not prepared yet)


def disk_needs(cfg) -> list[DiskNeed]:
    """What the run will write: the prepared dataset (unless the cache has it) and the checkpoints it keeps."""
    return [_dataset_need(cfg), _checkpoints_need(cfg)]


def _dataset_need(cfg) -> DiskNeed:
    """An estimate from the source's text size: 2 bytes a token at about 4 characters a token (a hub corpus:
    unknown until it is read, beside its download in the hub's cache). With a pretrained tokenizer the cache's
    folder is known only once the tokenizer is read: the estimate stands whether or not the cache holds it."""
    data = OmegaConf.to_object(cfg.data) if OmegaConf.is_config(cfg.data) else cfg.data
    where = Path(os.path.expanduser(str(cfg.cache_dir)))
    source = source_from_config(data)
    if source.name == "hub":
        return DiskNeed("the prepared dataset (a hub corpus: size unknown until read)", where, None)
    final_dir = dataset_folder(data, str(where), source)
    cached = store.cached_dataset(final_dir) if final_dir is not None else None
    if cached is not None:
        return DiskNeed("the prepared dataset (cached)", where, 0, cached.meta["tokens_packed"])
    damaged = (f"its cached copy in {final_dir} is damaged and will be rebuilt: "
               if final_dir is not None and (final_dir / store.META_FILE).exists() else "")
    text = source.total_bytes()
    if text is None:
        return DiskNeed(f"the prepared dataset ({damaged}size unknown until read)", where, None)
    tokens = text / CHARACTERS_PER_TOKEN
    if data.max_tokens is not None:
        tokens = min(tokens, data.max_tokens)
    return DiskNeed(f"the prepared dataset ({damaged}about {size_text(tokens, '')} tokens from {size_text(text)} of "
                    "text)", where, int(tokens * BYTES_PER_TOKEN), tokens)


def _checkpoints_need(cfg) -> DiskNeed:
    """The checkpoints on disk at once: keep_last step checkpoints, the one being written before the oldest
    goes, final, and every keep_at; each the fp32 weights and the optimizer's state."""
    where = Path(os.path.expanduser(str(cfg.output_dir)))
    parameters = model_parameters(cfg)
    if parameters is None:
        return DiskNeed("the checkpoints (the model's size unknown)", where, None)
    each = parameters * (4 + state_bytes(cfg))
    count = cfg.checkpoint.keep_last + 2 + len(cfg.checkpoint.keep_at)
    return DiskNeed(f"{count} checkpoints of {size_text(each)} ({parameters / 1e6:.1f}M parameters: weights and "
                    f"{cfg.train.optim.name}'s state)", where, count * each)


def model_parameters(cfg) -> int | None:
    """The parameters of the model `arch` builds, counted on shapes alone (None: sizes no tensor can have, which
    the model's check names)."""
    try:
        with shapes_only():
            model = build_mlm_model(as_model_config(cfg.arch), cfg.data.tokenizer.vocab_size)
    except (RuntimeError, ValueError, OverflowError):
        return None
    return sum(parameter.numel() for parameter in model.parameters())


def state_bytes(cfg) -> float:
    """The optimizer's state per parameter, at most (AdamW: two fp32 moments)."""
    known = OPTIMIZERS.by_name.get(cfg.train.optim.name)
    return known.state_bytes_per_parameter if known else 8


def check_memory(cfg) -> None:
    """The model's fp32 weights, gradients and optimizer state (unless impl.offload_optimizer keeps it on the CPU)
    within the device's memory (the microbatch's activations come on top: the search and preflight's trial judge
    them); a model past it would end the set-up in an allocation error."""
    parameters, offloaded = model_parameters(cfg), OmegaConf.select(cfg, "impl.offload_optimizer")
    need = None if parameters is None else parameters * (8 + (0 if offloaded else state_bytes(cfg)))
    device = device_type(cfg)
    memory = (torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", "0"))).total_memory
              if device == "cuda" else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    if need is None or need > memory:
        size = "sizes no tensor can have" if need is None else (
            f"{parameters:.3g} parameters, whose fp32 weights, gradients and {cfg.train.optim.name}'s state need "
            f"about {size_text(need)}")
        raise CrammingError(f"memory: the model of arch has {size}, and {device} has {size_text(memory)}: "
                            "choose a smaller model (arch.hidden_size, arch.num_layers, arch.intermediate_size)")


def check_disk(needs: list[DiskNeed]) -> None:
    """Refuse when what the run will write does not fit the free space of the filesystems it writes to."""
    by_filesystem: dict[int, list[DiskNeed]] = {}
    for need in needs:
        if need.bytes:
            by_filesystem.setdefault(nearest_existing(need.where).stat().st_dev, []).append(need)
    for same in by_filesystem.values():
        total, existing = sum(need.bytes for need in same), nearest_existing(same[0].where)
        free = shutil.disk_usage(existing).free
        if total > free:
            said = " and ".join(f"{need.what} in {need.where}" for need in same)
            raise CrammingError(f"disk: the run needs about {size_text(total)} ({said}) and {existing} has "
                                f"{size_text(free)} free: free some space, write elsewhere (output_dir=, "
                                "cache_dir=) or keep fewer checkpoints (checkpoint.keep_last=)")


def nearest_existing(path: Path) -> Path:
    return next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
