"""Small SuperGLUE and RACE folders in the official layouts, written by the tests: a handful of rows of each
task in its release's format (the real data is not shipped here)."""

import json
import random
from pathlib import Path

NAMES = ["Anna", "Ben", "Clara", "David", "Eva", "Frank"]
PLACES = ["the market", "the station", "the library", "the river", "the school", "the garden"]
VERBS = ["walked to", "ran to", "looked at", "painted", "visited", "left"]


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(PLACES)}."


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def boolq(rng, count):
    return [{"question": f"did {rng.choice(NAMES).lower()} go to {rng.choice(PLACES)}", "passage": sentence(rng) * 2,
             "idx": i, "label": rng.random() < 0.5} for i in range(count)]


def cb(rng, count):
    labels = ["entailment", "contradiction", "neutral"]
    return [{"premise": sentence(rng), "hypothesis": sentence(rng), "label": labels[i % 3], "idx": i}
            for i in range(count)]


def copa(rng, count):
    return [{"premise": sentence(rng), "choice1": sentence(rng), "choice2": sentence(rng),
             "question": rng.choice(["cause", "effect"]), "label": rng.randrange(2), "idx": i} for i in range(count)]


def multirc(rng, paragraphs):
    records = []
    for p in range(paragraphs):
        questions = [{"question": f"where did {rng.choice(NAMES)} go?", "idx": q,
                      "answers": [{"text": rng.choice(PLACES), "idx": a, "label": rng.randrange(2)}
                                  for a in range(2 + (q % 2))]} for q in range(2)]
        records.append({"idx": p, "version": 1.1, "passage": {"text": sentence(rng) + " " + sentence(rng),
                                                              "questions": questions}})
    return records


def record(rng, passages):
    records = []
    for p in range(passages):
        first, second = rng.sample(NAMES, 2)
        text = f"@highlight\n{first} met {second} at {rng.choice(PLACES)}. {second} was happy."
        entities = [{"start": text.index(first), "end": text.index(first) + len(first) - 1},
                    {"start": text.index(second), "end": text.index(second) + len(second) - 1}]
        answer = rng.choice([first, second])
        qas = [{"query": "@placeholder smiled at the others.", "idx": 10 * p + q,
                "answers": [{"start": text.index(answer), "end": text.index(answer) + len(answer) - 1,
                             "text": answer}]} for q in range(2)]
        records.append({"source": "Daily mail", "idx": p, "passage": {"text": text, "entities": entities},
                        "qas": qas})
    return records


def rte(rng, count):
    return [{"premise": sentence(rng), "hypothesis": sentence(rng), "idx": i,
             "label": ["entailment", "not_entailment"][i % 2]} for i in range(count)]


def wic(rng, count):
    return [{"word": "place", "sentence1": sentence(rng), "sentence2": sentence(rng), "idx": i,
             "label": rng.random() < 0.5, "start1": 0, "end1": 4, "start2": 0, "end2": 4, "version": 1.1}
            for i in range(count)]


def wsc(rng, count):
    rows = []
    for i in range(count):
        name = rng.choice(NAMES)
        text = f"{name} thanked the porter because he was kind."
        rows.append({"text": text, "idx": i, "label": rng.random() < 0.5,
                     "target": {"span1_index": 0, "span1_text": name, "span2_index": 5, "span2_text": "he"}})
    return rows


def axb(rng, count):
    return [{"sentence1": sentence(rng), "sentence2": sentence(rng), "idx": i, "logic": "Negation",
             "label": ["entailment", "not_entailment"][i % 2]} for i in range(count)]


def axg(rng, pairs):
    rows = []
    for pair in range(pairs):
        hypothesis = f"The porter was kind to {rng.choice(NAMES)}."
        for pronoun in ("his", "her"):
            rows.append({"premise": f"The porter carried {pronoun} bags to {rng.choice(PLACES)}.",
                         "hypothesis": hypothesis, "idx": len(rows), "pair_id": pair,
                         "label": ["entailment", "not_entailment"][pair % 2]})
    return rows


def unlabelled(records: list[dict]) -> list[dict]:
    """A test file: the same objects without their labels (MultiRC's and ReCoRD's nested ones too)."""
    out = json.loads(json.dumps(records))
    for item in out:
        item.pop("label", None)
        for question in item.get("passage", {}).get("questions", []) if isinstance(item.get("passage"), dict) else []:
            for answer in question["answers"]:
                answer.pop("label")
        for qa in item.get("qas", []):
            qa.pop("answers")
    return out


def race_file(rng, name: str, questions: int) -> dict:
    return {"id": name, "article": " ".join(sentence(rng) for _ in range(3)),
            "questions": [f"Where did {rng.choice(NAMES)} go?" for _ in range(questions)],
            "options": [[rng.choice(PLACES) for _ in range(4)] for _ in range(questions)],
            "answers": [rng.choice("ABCD") for _ in range(questions)]}


def write_superglue(root: Path, seed: int = 0) -> Path:
    """<root>/{BoolQ,CB,COPA,MultiRC,ReCoRD,RTE,WiC,WSC}/{train,val,test}.jsonl (test: val without labels, so
    its predictions can be checked against the validation scores), AX-b/AX-b.jsonl, AX-g/AX-g.jsonl, and GLUE's
    RTE/{train,dev,test}.tsv (SuperGLUE's RTE is GLUE's rte)."""
    rng = random.Random(seed)
    makers = {"BoolQ": (boolq, 12, 8), "CB": (cb, 12, 9), "COPA": (copa, 12, 8), "MultiRC": (multirc, 4, 3),
              "ReCoRD": (record, 4, 3), "RTE": (rte, 12, 6), "WiC": (wic, 12, 8), "WSC": (wsc, 12, 8)}
    for folder, (make, train, val) in makers.items():
        write_jsonl(root / folder / "train.jsonl", make(rng, train))
        validation = make(rng, val)
        write_jsonl(root / folder / "val.jsonl", validation)
        write_jsonl(root / folder / "test.jsonl", unlabelled(validation))
    for split, records in (("train", rte(rng, 12)), ("dev", rte(rng, 6))):  # GLUE's RTE, beside SuperGLUE's
        rows = [f"{r['idx']}\t{r['premise']}\t{r['hypothesis']}\t{r['label']}" for r in records]
        (root / "RTE" / f"{split}.tsv").write_text("\n".join(["index\tsentence1\tsentence2\tlabel", *rows]) + "\n")
    test = ["index\tsentence1\tsentence2", *(row.rpartition("\t")[0] for row in rows)]  # the dev rows, unlabelled
    (root / "RTE" / "test.tsv").write_text("\n".join(test) + "\n")
    write_jsonl(root / "AX-b" / "AX-b.jsonl", axb(rng, 8))
    write_jsonl(root / "AX-g" / "AX-g.jsonl", axg(rng, 4))
    return root


def write_race(root: Path, seed: int = 0) -> Path:
    """<root>/RACE/{train,dev}/{middle,high}/<n>.txt, one JSON object a file as released."""
    rng = random.Random(seed)
    for split, files in (("train", 3), ("dev", 2)):
        for level in ("middle", "high"):
            for number in range(files):
                path = root / "RACE" / split / level / f"{number}.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(race_file(rng, f"{level}{number}.txt", 2)), encoding="utf-8")
    return root


def all_texts() -> list[str]:
    """Text for a tiny tokenizer that knows these files' words."""
    rng = random.Random(1)
    return [sentence(rng) for _ in range(300)] + [f"where did {name} go to {place}" for name in NAMES
                                                  for place in PLACES] + ["cause effect the porter carried his her"]
