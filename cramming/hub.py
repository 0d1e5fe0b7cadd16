"""The Hugging Face hub, asked once whether it answers, before the first hub read of a command (a hub corpus, a
pretrained tokenizer, `ckpt=hf:`, a task's or BLiMP's hub copy).

huggingface_hub retries a connection that fails five times (1+2+4+8+8 s, two warning lines each) on every
file it asks for: without the network, a command spent a minute and forty lines before its own one. So the
first read tries one connection to the hub's endpoint, at most PROBE_TIMEOUT_S; where none comes, the process
goes on as HF_HUB_OFFLINE=1 would have it: what the caches hold is read, anything else fails at once, in the
command's own line. With HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set, nothing is tried.
"""

import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 5.0  # a connection to the hub's endpoint; a black-holed network costs this once, not minutes
_OFFLINE: dict[str, str | None] = {}  # the answer, once asked: None when the hub answered, else why not


def offline() -> str | None:
    """Why the hub is out of reach for this process (HF_HUB_OFFLINE set, or its endpoint did not answer the
    first time), or None when it answered. Asked once a process; an unanswered probe switches the hub's
    libraries to their offline mode for the rest of it, and says so in one line."""
    from huggingface_hub import constants  # noqa: PLC0415 -- the hub client, only where the hub is read

    if "reason" in _OFFLINE:
        return _OFFLINE["reason"]
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    _OFFLINE["reason"] = _probe(constants.ENDPOINT)
    if _OFFLINE["reason"] is not None:
        _go_offline(constants)
        log.warning("the Hugging Face hub is out of reach (%s): only what its caches hold is read, as with "
                    "HF_HUB_OFFLINE=1", _OFFLINE["reason"])
    return _OFFLINE["reason"]


def offline_for(reference: str) -> str | None:
    """offline() for a reference that may be a local folder: a folder reads no hub, so nothing is asked."""
    return None if Path(reference).expanduser().is_dir() else offline()


def out_of_reach(offline: str | None) -> str:
    """What an error message adds when the hub is out of reach: why (nothing when it answered)."""
    return f"; the hub is out of reach: {offline}" if offline else ""


def _probe(endpoint: str) -> str | None:
    from huggingface_hub.utils import get_session  # noqa: PLC0415 -- as above

    try:
        get_session().head(endpoint, timeout=PROBE_TIMEOUT_S)  # any answer, an HTTP error included, is an answer
    except Exception as error:  # the network boundary: DNS, refused, timed out, proxy and TLS errors alike
        detail = " ".join(str(error).split())[:120]
        return f"{endpoint} did not answer: {type(error).__name__}" + (f": {detail}" if detail else "")
    return None


def _go_offline(constants) -> None:
    """huggingface_hub and transformers read `constants.HF_HUB_OFFLINE` at each request; datasets its own copy,
    taken from it when datasets is first imported."""
    constants.HF_HUB_OFFLINE = True
    if "datasets.config" in sys.modules:
        sys.modules["datasets.config"].HF_HUB_OFFLINE = True
