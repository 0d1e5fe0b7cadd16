"""The GPU-only options and GPU precisions, each training a few optimizer steps through pretrain.py on the
GPU with finite losses; divergence handled in bf16 and in fp16 with loss scaling; the export's logits on CUDA."""

import math

import pytest
import torch
from transformers import AutoModelForMaskedLM

from cramming.model.checkpoint import load_pretrained
from cramming.model.export import export_to_transformers
from tests.eval.conftest import make_checkpoint
from tests.gpu.conftest import STEPS, TINY_GPU_RUN, losses, run_script, summary, the_run

EAGER = ["impl.compile=false"]  # compiling is tested with the budget run and fp8; eager keeps these short


@pytest.mark.parametrize("option", [
    ["impl.fp8=true", "impl.compile=true"],  # fp8 needs compile (Hopper/Ada)
    ["train.optim.name=adamw8bit", *EAGER],
    ["impl.offload_optimizer=true", *EAGER],
    ["train.sparsity.method=semi-structured-2:4", *EAGER],
    ["impl.activation_checkpointing=true", *EAGER],
    ["impl.precision=fp16", *EAGER],
], ids=["fp8", "adamw8bit", "offload", "2:4", "activation-checkpointing", "fp16"])
def test_each_gpu_option_trains_with_finite_losses(tmp_path, option):
    run = run_script("pretrain.py", *TINY_GPU_RUN, *STEPS, *option, f"output_dir={tmp_path}",
                     f"cache_dir={tmp_path / 'cache'}")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    run_dir = the_run(tmp_path)
    assert len(losses(run_dir)) == 6 and all(math.isfinite(loss) for loss in losses(run_dir))
    assert summary(run_dir)["nonfinite_skipped"] == 0


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_divergence_stops_in_one_line_without_a_bad_checkpoint(tmp_path, precision):
    run = run_script("pretrain.py", *TINY_GPU_RUN, *STEPS, *EAGER, f"impl.precision={precision}",
                     "train.max_steps=30", "train.optim.lr=1e30", "checkpoint.interval_minutes=1e-9",
                     f"output_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "non-finite" in last and "diverged" in last
    assert summary(the_run(tmp_path))["stop_reason"] == "non-finite"


@pytest.mark.quick
def test_the_export_gives_our_logits_on_cuda(tmp_path):
    texts = [f"the number {i} is written here in a sentence of words." for i in range(200)]
    checkpoint = make_checkpoint(tmp_path / "ckpt", texts, vocab_size=200)
    export_to_transformers(checkpoint, tmp_path / "hf")
    ours, tokenizer = load_pretrained(checkpoint)
    ours = ours.cuda().eval()
    theirs = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).cuda().eval()
    inputs = tokenizer(["the number 3 is", "a sentence of words written here"], padding=True,
                       return_tensors="pt").to("cuda")
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        expected = ours(inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        torch.testing.assert_close(theirs(**inputs).logits[real], expected[real], rtol=1e-4, atol=1e-4)
