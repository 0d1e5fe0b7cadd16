"""BLiMP (Warstadt et al. 2020, CC BY 4.0): 67 paradigms of 1,000 minimal pairs each, scored zero-shot. A pair is
right when the masked LM gives its good sentence the higher pseudo-log-likelihood (cramming.eval.pll).

The pairs come from the hub (nyu-mll/blimp), a local folder of the 67 .jsonl or .jsonl.gz files (read with
`datasets`' json builder, as GLUE's local files are), or the subset that ships in the package (the first
SUBSET_PAIRS pairs of each paradigm: blimp_data/, credited in blimp_data/README.md). Scores are percentages:
a paradigm's is its share of right pairs, a field's and the overall one the mean over the paradigms scored, as the
published summary (blimp_data/models_summary.jsonl) defines them.
"""

import csv
import dataclasses
import gzip
import json
import logging
import statistics
from pathlib import Path
from typing import Callable

import numpy as np

from cramming import hub
from cramming.errors import CrammingError
from cramming.eval.pll import DEFAULT_METHOD, MaskedLM, check_method, score_texts

PACKAGED = Path(__file__).resolve().parent / "blimp_data"
SUBSET_FILE = PACKAGED / "blimp_subset.jsonl.gz"
SUBSET_PAIRS = 100  # pairs per paradigm in the packaged subset
HUB_DATASET = "nyu-mll/blimp"
PARADIGMS = 67
FIELDS = ("morphology", "syntax", "semantics", "syntax_semantics")
# The published rows shown beside a result: column of models_summary.jsonl -> name (humans: the validation csv)
PUBLISHED = {"ngram": "5-gram", "lstm": "LSTM", "txl": "Transformer-XL", "gpt2": "GPT-2"}
HUMAN = "human"
COLUMNS = ("UID", "field", "sentence_good", "sentence_bad")
log = logging.getLogger(__name__)


@dataclasses.dataclass
class Pair:
    good: str
    bad: str


@dataclasses.dataclass
class Paradigm:
    uid: str
    field: str  # one of FIELDS
    pairs: list[Pair]


def _field(name: str) -> str:
    return name.replace("/", "_")  # one paradigm's files spell syntax_semantics "syntax/semantics"


def _paradigms(records, pairs_per_paradigm: int | None, source: str) -> list[Paradigm]:
    """Records (dicts with UID, field, sentence_good, sentence_bad) grouped by paradigm in file order; the
    first `pairs_per_paradigm` of each."""
    paradigms: dict[str, Paradigm] = {}
    for record in records:
        try:
            uid, field, good, bad = (record[key] for key in COLUMNS)
        except KeyError as missing:
            raise CrammingError(f"{source}: a BLiMP record needs {missing} (UID, field, sentence_good, "
                                "sentence_bad)") from None
        paradigm = paradigms.setdefault(uid, Paradigm(uid, _field(field), []))
        if pairs_per_paradigm is None or len(paradigm.pairs) < pairs_per_paradigm:
            paradigm.pairs.append(Pair(good, bad))
    if not paradigms:
        raise CrammingError(f"{source}: no BLiMP pairs found")
    return sorted(paradigms.values(), key=lambda p: p.uid)


def load_packaged(pairs_per_paradigm: int | None = None) -> list[Paradigm]:
    """The packaged subset (offline): the first pairs_per_paradigm (at most SUBSET_PAIRS) of each paradigm."""
    if pairs_per_paradigm is not None and not 1 <= pairs_per_paradigm <= SUBSET_PAIRS:
        raise CrammingError(f"the packaged BLiMP subset holds {SUBSET_PAIRS} pairs per paradigm; "
                            f"asked for {pairs_per_paradigm}")
    with gzip.open(SUBSET_FILE, "rt", encoding="utf-8") as handle:
        return _paradigms(map(json.loads, handle), pairs_per_paradigm, str(SUBSET_FILE))


def load_blimp(blimp_dir: str | None, pairs_per_paradigm: int | None = None, key: str = "blimp_dir") -> list[Paradigm]:
    """Every paradigm from a folder of .jsonl / .jsonl.gz files, or from the hub when blimp_dir is None."""
    if pairs_per_paradigm is not None and pairs_per_paradigm < 1:
        raise CrammingError(f"pairs_per_paradigm={pairs_per_paradigm} must be at least 1 (or unset: all)")
    import datasets  # noqa: PLC0415 -- seconds to import: the packaged subset needs none

    if blimp_dir is None:
        return _paradigms(_hub_records(), pairs_per_paradigm, HUB_DATASET)
    folder = Path(blimp_dir).expanduser()
    if not folder.is_dir():
        raise CrammingError(f"{key}={blimp_dir}: no such folder")
    files = sorted(str(path) for pattern in ("*.jsonl", "*.jsonl.gz") for path in folder.glob(pattern))
    if not files:
        raise CrammingError(f"{key}={blimp_dir}: no .jsonl or .jsonl.gz files in it")
    datasets.disable_progress_bars()
    records, skipped = [], []
    for path in files:  # one at a time: the paradigms' files differ in their columns
        try:
            rows = datasets.load_dataset("json", data_files=path, split="train")
        except (datasets.exceptions.DatasetGenerationError, ValueError) as error:
            raise CrammingError(f"{key}={blimp_dir}: cannot read {Path(path).name} ({_reason(error)})") from None
        if set(COLUMNS) <= set(rows.column_names):
            records.append(rows.select_columns(list(COLUMNS)))
        else:  # a summary file beside the paradigms (models_summary.jsonl)
            skipped.append(Path(path).name)
    if skipped:
        log.info("%s: not BLiMP pairs (no %s), skipped: %s", key, "/".join(COLUMNS), ", ".join(skipped))
    return _paradigms((row for rows in records for row in rows), pairs_per_paradigm, f"{key}={blimp_dir}")


def _reason(error: BaseException) -> str:
    """The first line of the error and of its cause (datasets wraps the real reason)."""
    parts = [str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__]
    if error.__cause__ is not None and str(error.__cause__).strip():
        parts.append(str(error.__cause__).strip().splitlines()[0])
    return ": ".join(parts)


def _hub_records():
    """Every paradigm of nyu-mll/blimp (one hub config each)."""
    import datasets  # noqa: PLC0415 -- as above

    offline = hub.offline()
    try:
        names = datasets.get_dataset_config_names(HUB_DATASET)
        for name in names:
            yield from datasets.load_dataset(HUB_DATASET, name, split="train")
    except (ConnectionError, OSError, ValueError) as error:
        raise CrammingError(f"blimp_dir unset: cannot load {HUB_DATASET} from the hub "
                            f"({_reason(error)}{hub.out_of_reach(offline)}); "
                            "give blimp_dir=<folder of the BLiMP .jsonl files>") from None


def blimp_texts(paradigms: list[Paradigm]) -> list[str]:
    """Every pair's good then bad sentence, paradigm after paradigm."""
    return [text for paradigm in paradigms for pair in paradigm.pairs for text in (pair.good, pair.bad)]


def score_blimp(lm: MaskedLM, paradigms: list[Paradigm], method: str = DEFAULT_METHOD, batch_size: int = 256,
                on_rows: Callable[[int], None] | None = None) -> dict:
    """{overall, fields, paradigms, pairs, method, rows}: the percentages of pairs right, with blimp.overall the
    mean over the paradigms scored and each field the mean over its paradigms; `on_rows`: as score_texts'."""
    check_method(method)
    scores = score_texts(lm, blimp_texts(paradigms), method, batch_size, on_rows)
    right = scores.pll[0::2] > scores.pll[1::2]  # (pairs,): good above bad; a tie counts as wrong
    by_paradigm, start = {}, 0
    for paradigm in paradigms:
        count = len(paradigm.pairs)
        by_paradigm[paradigm.uid] = 100.0 * float(np.mean(right[start:start + count]))
        start += count
    return blimp_result(paradigms, by_paradigm, method, scores.rows)


def blimp_result(paradigms: list[Paradigm], by_paradigm: dict[str, float], method: str, rows: int) -> dict:
    """score_blimp's dict from the percentages of the paradigms scored (`by_paradigm`: UID -> percent; the
    paradigms not in it, not yet scored, are left out of every mean)."""
    scored = [paradigm for paradigm in paradigms if paradigm.uid in by_paradigm]
    fields = {field: statistics.fmean(by_paradigm[p.uid] for p in scored if p.field == field)
              for field in FIELDS if any(p.field == field for p in scored)}
    return {"overall": statistics.fmean(by_paradigm.values()), "fields": fields, "paradigms": dict(by_paradigm),
            "pairs": sum(len(p.pairs) for p in scored), "method": method, "rows": rows}


def published(fields: dict[str, str]) -> dict[str, dict]:
    """{model: {"overall", "fields"}}: the published models' and humans' means (percent) over the paradigms of
    `fields` (UID -> field) that the summaries hold (models_summary.jsonl and human_validation_summary.csv of the
    BLiMP repository), overall and per field."""
    rows = [json.loads(line) for line in (PACKAGED / "models_summary.jsonl").read_text().splitlines() if line]
    by_uid = {row["UID"]: row for row in rows if row["UID"] != "overall"}
    with open(PACKAGED / "human_validation_summary.csv", newline="") as handle:
        humans = {row["Condition"]: float(row["total_mean"]) for row in csv.DictReader(handle)}
    columns = {name: {uid: row[column] for uid, row in by_uid.items()} for column, name in PUBLISHED.items()}
    columns[HUMAN] = humans
    known = {uid: field for uid, field in fields.items() if uid in by_uid and uid in humans}
    if not known:
        return {}

    def mean(values: dict[str, float], uids) -> float:
        return 100 * statistics.fmean(values[uid] for uid in uids)

    return {name: {"overall": mean(values, known),
                   "fields": {field: mean(values, [u for u, f in known.items() if f == field])
                              for field in FIELDS if field in known.values()}}
            for name, values in columns.items()}
