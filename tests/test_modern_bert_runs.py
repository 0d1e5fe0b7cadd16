"""arch=modern-bert-tiny through the command line, as crammed-bert goes: pretraining at data.seq_length=512
(preparation, packing, round(0.25 * 512) = 128 masks a row, validation) where its 128-token window is
shorter than the rows, an exact resume, a budget-clocked run, the microbatch search's trial step at 512, the
native export and GLUE on the checkpoint; and a bad value of a new key in one line."""

import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

from cramming.data.store import PreparedDataset
from cramming.data.stream import Microbatches
from cramming.model.checkpoint import load_pretrained
from tests.commands import in_process, in_subprocess
from tests.eval.conftest import GLUE_DIR
from tests.train.runs import NO_PROBE, copy_run, only_run, records, summary

STEPS = 4
RUN = ["data=embedded", "arch=modern-bert-tiny", "gpu=cpu", "name=t", NO_PROBE, "data.seq_length=512", "train=steps",
       f"train.max_steps={STEPS}", "train.batch_size=16", "impl.microbatch_size=8", "budget=1",
       "logging.every_steps=1", "checkpoint.interval_minutes=1e-9", f"checkpoint.keep_last={STEPS}"]


@pytest.fixture(scope="module")
def long_run(tmp_path_factory, session_cache):
    """Four steps of modern-bert-tiny on 512-token rows, every step's checkpoint kept."""
    output_dir = tmp_path_factory.mktemp("modern-bert")
    run = in_process("pretrain", *RUN, f"output_dir={output_dir}", f"cache_dir={session_cache}")
    assert run.returncode == 0, run.stderr[-3000:]
    return only_run(output_dir)


def prepared_dataset(session_cache, seq_length: int) -> PreparedDataset:
    found = [PreparedDataset.open(meta.parent) for meta in (session_cache / "data").glob("embedded-*/meta.json")]
    (dataset,) = [dataset for dataset in found if dataset.seq_length == seq_length]
    return dataset


@pytest.mark.slow
def test_pretraining_at_512_packs_masks_and_validates(long_run, session_cache):
    facts = summary(long_run)
    assert facts["stop_reason"] == "max_steps" and facts["steps"] == STEPS
    assert facts["tokens"] == records(long_run)[-1]["tokens"] and facts["tokens"] % (8 * 512) == 0  # whole rows
    assert torch.isfinite(torch.tensor(facts["validation"]["final_loss"]))
    dataset = prepared_dataset(session_cache, 512)
    assert dataset.rows().shape[1] == 512 and dataset.held_out_rows > 0
    batch = Microbatches(dataset, microbatch_size=4, rank=0, world_size=1, mlm_rate=0.25, seed=0)[0]
    assert batch["input_ids"].shape == (4, 512) and batch["masked_positions"].shape == (4, 128)
    assert ((batch["labels"] != -100).sum(1) <= 128).all()
    assert (batch["labels"].gather(1, batch["masked_positions"]) != -100).sum() > 4 * 120


@pytest.mark.slow
def test_the_trained_model_attends_locally_beyond_half_its_window(long_run):
    """At 512 tokens the local layers' window (64 each side) is far shorter than the row: the trained
    weights with every layer global compute other logits."""
    local, _ = load_pretrained(long_run / "checkpoints" / "final")
    widened, _ = load_pretrained(long_run / "checkpoints" / "final")
    for layer in widened.bert.layer[1:]:  # layers 1 and 2 attend to every token, with their own theta still
        layer.attention.half_window = None
    ids = torch.randint(5, local.vocab_size, (2, 512), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (local(ids).logits - widened(ids).logits).abs().max() > 1e-3


@pytest.mark.slow
def test_a_resume_from_the_command_line_continues_exactly(long_run, tmp_path):
    run_dir = copy_run(long_run, tmp_path)
    for later in ("step-00000003", "step-00000004", "final"):
        shutil.rmtree(run_dir / "checkpoints" / later)
    resumed = in_subprocess("pretrain", *RUN, f"output_dir={tmp_path}",
                            f"resume={run_dir / 'checkpoints' / 'step-00000002'}", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout
    expected, found = (load_file(run / "checkpoints" / "final" / "model.safetensors") for run in (long_run, run_dir))
    assert expected.keys() == found.keys() and all(torch.equal(expected[key], found[key]) for key in expected)
    assert summary(run_dir)["steps"] == STEPS and summary(run_dir)["tokens"] == summary(long_run)["tokens"]


@pytest.mark.slow
def test_a_budget_run_stops_on_its_budget(long_run, shared_cache, tmp_path, simulated_clock):
    """The recipe's budget clock and schedules (long_run prepared the 512-token rows it reads)."""
    run = in_process("pretrain", "data=embedded", "arch=modern-bert-tiny", "gpu=cpu", "name=t", NO_PROBE,
                     "budget=0.0005", "data.seq_length=512", "impl.microbatch_size=8", "train.validation.fractions=[]",
                     f"output_dir={tmp_path}")
    assert run.returncode == 0, run.stderr[-3000:]
    facts = summary(only_run(tmp_path))
    assert facts["stop_reason"] == "budget" and facts["steps"] >= 1


def test_the_microbatch_trial_step_runs_at_512(monkeypatch):
    """The search's trial (a real forward and backward, torch.cuda's memory gauges stood in for) on
    modern-bert-tiny's 512-token rows with their 128 masked positions."""
    from cramming.engine.precision import Precision
    from cramming.model import build_mlm_model
    from cramming.train.microbatch import cuda_step
    from tests.model.conftest import arch_config

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 2**30)
    model = build_mlm_model(arch_config("modern-bert-tiny"), 300)
    seen = []
    model.register_forward_hook(lambda module, args, kwargs, output: seen.append(
        (kwargs["input_ids"].shape, kwargs["masked_positions"].shape, output.loss.item())), with_kwargs=True)
    step = cuda_step(model, seq_length=512, vocab_size=300, mlm_rate=0.25, precision=Precision("fp32", "cpu"),
                     extra_bytes=0)
    assert step(2) == 2**30
    assert seen[0][:2] == ((2, 512), (2, 128)) and seen[0][2] > 0
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.slow
def test_the_export_command_writes_a_native_modernbert_folder(long_run, tmp_path):
    run = in_process("export", f"ckpt={long_run}", f"out={tmp_path / 'hf'}")
    assert run.returncode == 0, run.stderr[-3000:]
    assert not list((tmp_path / "hf").glob("*.py"))
    exported = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()  # no trust_remote_code
    assert type(exported).__name__ == "ModernBertForMaskedLM"
    model, _ = load_pretrained(long_run / "checkpoints" / "final")
    ids = torch.randint(5, model.vocab_size, (3, 512), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(512) < torch.tensor([[512], [200], [31]])).long()
    with torch.no_grad():
        ours = model(ids, attention_mask=mask).logits
        theirs = exported(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(theirs[real], ours[real], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_glue_on_the_checkpoint_keeps_a_native_classifier(long_run, tmp_path):
    if not GLUE_DIR.is_dir():
        pytest.skip(f"GLUE TSV files not found at {GLUE_DIR}")
    run = in_subprocess("eval_glue", f"ckpt={long_run}", "eval.tasks=[rte]", f"eval.data_dir={GLUE_DIR}",
                        "eval.max_train_examples=32", "eval.epochs=1", "eval.save_models=true",
                        f"output_dir={tmp_path}", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    kept = AutoModelForSequenceClassification.from_pretrained(tmp_path / "models" / "rte-seed0")
    assert type(kept).__name__ == "ModernBertForSequenceClassification" and kept.config.classifier_dropout == 0.1


@pytest.mark.parametrize("override, message", [
    ("arch.global_rope_theta=500000", "arch.global_rope_theta=500000.0 has no effect without arch.positions=rope"),
    ("arch.local_attention=63",
     "arch.local_attention (63) must be even: half of the window lies on each side of the query"),
])
def test_a_bad_value_of_a_new_key_is_one_line(override, message, tmp_path):
    arch = "arch=crammed-bert-tiny" if "rope" in override else "arch=modern-bert-tiny"
    run = in_process("pretrain", "data=embedded", arch, "gpu=cpu", override, f"output_dir={tmp_path}")
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    assert run.stderr.strip().splitlines()[-1] == f"error: {message}"
