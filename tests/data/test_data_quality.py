"""Bad values of the data-quality keys (data.ordering's curricula, data=mixture and data.sources,
data.filter.trash_cutoff_scaling) end in one line naming the key, exit code 2 and no traceback, through the
commands' real entry points, before any text is read."""

import json

import pytest

from tests.test_bad_inputs import run_command


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("quality")
    (root / "a.txt").write_text("A first document of plain words, long enough to keep.\n")
    (root / "b.jsonl").write_text(json.dumps({"text": "Another document of plain words, long enough."}) + "\n")
    return {"root": str(root), "a": str(root / "a.txt"), "b": str(root / "b.jsonl"), "cache": str(root / "cache")}


def fill(text: str, paths: dict[str, str]) -> str:
    """The case with {a}, {b} and {root} filled in (str.format would read Hydra's braces)."""
    for name, value in paths.items():
        text = text.replace("{" + name + "}", value)
    return text


PREPARE_CASES = [  # (arguments, what the one line must contain)
    (["data=embedded", "data.ordering=sentence_curriculum"],
     "error: data.ordering='sentence_curriculum' is unknown; choose one of shuffle, corpus, frequency_curriculum, "
     "reverse_frequency_curriculum, length_curriculum, reverse_length_curriculum"),
    (["data=embedded", "data.filter.trash_cutoff_scaling=vocab"],
     "error: data.filter.trash_cutoff_scaling='vocab' is unknown; choose one of none, median"),
    (["data=embedded", "data.filter.trash_cutoff_scaling=median"],
     "error: data.filter.trash_cutoff=0.4 with trash_cutoff_scaling=median is a multiple of the corpus's median "
     "tokens per character and must be at least 1"),
    (["data=embedded", "data.filter.trash_cutoff_scaling=median", "data.filter.trash_cutoff=null"],
     "error: data.filter.trash_cutoff_scaling=median needs data.filter.trash_cutoff="),
    (["data=mixture"], "error: data=mixture needs data.sources="),
    (["data=mixture", "data.sources=[{files: {a}, weight: -1}]"], "error: data.sources[0].weight=-1.0 must be a "
                                                                 "positive number"),
    (["data=mixture", "data.sources=[{files: {a}, weight: 0}]"], "data.sources[0].weight=0.0 must be a positive"),
    (["data=mixture", "data.sources=[{files: {a}, weight: heavy}]"], "weight: Value 'heavy'"),
    (["data=mixture", "data.sources=[{files: {a}, wieght: 1}]"], "error: unknown key wieght"),
    (["data=mixture", "data.sources=[{weight: 1}]"], "error: data.sources[0] needs files"),
    (["data=mixture", "data.sources=[{files: {a}}, {files: {root}/none.txt}]"],
     "error: data.sources[1].files: no such file: {root}/none.txt"),
    (["data=mixture", "data.sources=[{files: {a}}, {files: {a}, weight: 2}]"],
     "error: data.sources: two sources are named '{a}'; give each a distinct name"),
    (["data=mixture", "data.sources=[{files: {a}, sample_by: page}]"],
     "error: data.sources[0].sample_by='page' is unknown; choose one of line, paragraph"),
    (["data=mixture", "data.files={a}", "data.sources=[{files: {b}}]"],
     "error: data=mixture reads data.sources; data.files is for data=local"),
    (["data=embedded", "data.sources=[{files: {a}}]"],
     "error: data.sources is set but data.source=embedded: mixtures need data=mixture"),
    (["data=local", "data.files={a}", "data.sources=[{files: {b}}]"],
     "error: data.sources is set but data.source=local"),
    (["data=mixture", "data.sources={files: {a}}"], "data.sources={files: "),
]


@pytest.mark.parametrize(("arguments", "message"), PREPARE_CASES)
def test_prepare_data_bad_value_is_one_line(paths, arguments, message):
    code, output = run_command("prepare_data", *(fill(a, paths) for a in arguments), f"cache_dir={paths['cache']}")
    assert code == 2, output
    assert fill(message, paths) in output and "Traceback" not in output
    assert len([line for line in output.splitlines() if line.strip()]) == 1, output


@pytest.mark.parametrize(("arguments", "message"), [
    (["data.ordering=length"], "error: data.ordering='length' is unknown"),
    (["data=mixture", "data.sources=[{files: {a}, weight: -2}]"], "error: data.sources[0].weight=-2.0 must be"),
    (["data.filter.trash_cutoff_scaling=median", "data.filter.trash_cutoff=0.5"], "must be at least 1 (e.g. 1.3)"),
])
def test_pretrain_stops_on_the_same_line(paths, arguments, message):
    tiny = ["data=embedded", "arch=crammed-bert-tiny", "gpu=cpu", "name=t", "budget=0.001",
            f"output_dir={paths['root']}/out", f"cache_dir={paths['cache']}"]
    code, output = run_command("pretrain", *tiny, *(fill(a, paths) for a in arguments))
    assert code == 2, output
    assert fill(message, paths) in output and "Traceback" not in output
