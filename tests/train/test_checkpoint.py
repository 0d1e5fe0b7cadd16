"""Training checkpoints: atomic writes, pruning to the last k, trainer state loaded without unpickling code."""

import dataclasses
import pickle

import pytest
import torch

from cramming.data.config import NormalizeConfig, TokenizerConfig
from cramming.data.sources import embedded_documents
from cramming.data.tokenizer import as_transformers_tokenizer, train_tokenizer
from cramming.errors import CrammingError
from cramming.files import WriteFailed
from cramming.model import build_mlm_model
from cramming.model.config import ModelConfig
from cramming.train import checkpointing as ckpt
from cramming.train.resume import load_state
from cramming.train.runs import FINAL, STATE_FILE, run_checkpoint, step_name
from cramming.train.stopping import Progress

TINY = ModelConfig(name="tiny", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["\n".join(document) for document in embedded_documents()]
    return as_transformers_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=500), NormalizeConfig()))


def save(run_dir, name, tokenizer, step=1, keep_last=2, pinned=()):
    model = build_mlm_model(TINY, 500)
    state = {"progress": dataclasses.asdict(Progress(step=step)), "optimizer": {"state": {}, "param_groups": []},
             "scaler": {}, "rng": {"torch": torch.get_rng_state(), "cuda": None}, "callbacks": {}, "fingerprint": {}}
    return ckpt.save_checkpoint(run_dir, name, model, tokenizer, state, keep_last, pinned=list(pinned))


def test_save_keeps_the_last_k_and_the_final(tmp_path, tokenizer):
    for step in (1, 2, 3):
        save(tmp_path, step_name(step), tokenizer, step)
    names = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000002", "step-00000003"]
    assert run_checkpoint(tmp_path, need_state=True).name == "step-00000003"
    save(tmp_path, FINAL, tokenizer, 4)
    assert run_checkpoint(tmp_path, need_state=True).name == "final"
    assert load_state(tmp_path / "checkpoints" / "final")["progress"]["step"] == 4
    assert {"model.safetensors", "config.json", "tokenizer.json", "trainer_state.pt"} <= {
        path.name for path in (tmp_path / "checkpoints" / "final").iterdir()
    }


def test_a_failed_write_leaves_no_checkpoint(tmp_path, tokenizer, monkeypatch):
    save(tmp_path, step_name(1), tokenizer)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(WriteFailed, match=r"cannot write the checkpoint .*step-00000002: disk full "
                                          r"\(.* free of .*\); its partial copy is removed"):
        save(tmp_path, step_name(2), tokenizer)
    assert run_checkpoint(tmp_path, need_state=True).name == "step-00000001"
    assert not (tmp_path / "checkpoints" / "step-00000002").exists()
    assert not (tmp_path / "checkpoints" / ".step-00000002.tmp").exists()  # removed: it keeps a disk full


class Payload:
    def __reduce__(self):
        return (print, ("this would run on load",))


def test_state_is_loaded_without_unpickling_code(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(pickle.dumps({"evil": Payload()}, protocol=2))
    with pytest.raises(CrammingError, match="cannot read"):
        load_state(tmp_path)
