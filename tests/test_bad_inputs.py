"""Bad input to the five commands ends in one line, `error: ...` naming the key, file or value, a non-zero
exit and no traceback — never a silent success. Each case runs the command's real entry point (Hydra,
the checks, the error boundary) in this process with its arguments; tests/*/test_*_cli.py run samples of
the same classes as subprocesses."""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cramming.cli import ablate, eval_glue, export, prepare_data, pretrain
from cramming.pretraining import pretrain as pretrain_in_process
from tests.conftest import SHARED_DATA
from tests.train.runs import NO_PROBE, STEP_RUN, TINY_DATA, compose_config

COMMANDS = {"pretrain": pretrain, "eval_glue": eval_glue, "prepare_data": prepare_data, "export": export,
            "ablate": ablate}
GLUE_DIR = SHARED_DATA / "glue"


def run_command(name: str, *args: str) -> tuple[int, str]:
    """The command as `python <command> args...` runs it: its exit code and everything it printed."""
    argv, output = sys.argv, io.StringIO()
    sys.argv = [name, *args]
    try:
        with contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
            COMMANDS[name].main()
        code = 0
    except SystemExit as stop:
        code = stop.code
    finally:
        sys.argv = argv
    return code, output.getvalue()


def read_only_directory(root: Path) -> Path | None:
    """A directory this process cannot write in: a chmod 555 one, or for root (whom permissions do not
    stop) a read-only mount such as /sys; None where neither exists."""
    locked = root / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    for candidate in (locked, Path("/sys")):
        try:
            os.rmdir(tempfile.mkdtemp(dir=candidate))
        except OSError:
            return candidate
    return None


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A real tiny training run's checkpoints, and damaged copies of them, and bad inputs on disk."""
    root = tmp_path_factory.mktemp("bad")
    cache = root / "cache"
    cfg = compose_config(STEP_RUN + ["train.max_steps=1", f"output_dir={root / 'runs'}", f"cache_dir={cache}"])
    good = pretrain_in_process(cfg) / "checkpoints" / "final"
    paths = {"root": root, "cache": cache, "good": good, "file": root / "a-file"}
    paths["file"].write_text("not a directory\n")
    paths["readonly"] = read_only_directory(root)

    def variant(name: str, damage) -> None:
        copy = root / name
        shutil.copytree(good, copy)
        damage(copy)
        paths[name] = copy

    def nan_weights(directory):
        weights = load_file(directory / "model.safetensors")
        weights[next(iter(weights))].view(-1)[0] = float("nan")
        save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})

    class Payload:
        def __reduce__(self):
            return (print, ("this would run on load",))

    def config_edit(**changes):
        def edit(directory):
            config = json.loads((directory / "config.json").read_text())
            config["arch"].update(changes)
            (directory / "config.json").write_text(json.dumps(config))
        return edit

    variant("bare", lambda d: None)  # a checkpoint directory outside any run
    variant("nan", nan_weights)
    variant("truncated", lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:500]))
    variant("no_tokenizer", lambda d: (d / "tokenizer.json").unlink())
    variant("wrong_shapes", config_edit(intermediate_size=256))
    variant("foreign_state", lambda d: torch.save({"step": 3}, d / "trainer_state.pt"))
    variant("code_state", lambda d: (d / "trainer_state.pt").write_bytes(__import__("pickle").dumps({"x": Payload()})))
    variant("truncated_state", lambda d: (d / "trainer_state.pt").write_bytes(b"PK\x03\x04 broken"))
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "binary.txt").write_bytes(bytes(range(256)) * 400)
    (corpus / "empty.txt").write_text("")
    (corpus / "table.csv").write_text("a,b\n1,2\n")
    paths["corpus"] = corpus
    glue = root / "glue"
    for name, rows in (("empty", []), ("malformed", ["1\tonly two fields"] * 20)):
        (glue / name / "RTE").mkdir(parents=True)
        header = "index\tsentence1\tsentence2\tlabel"
        for split in ("train", "dev"):
            (glue / name / "RTE" / f"{split}.tsv").write_text("\n".join([header, *rows]) + "\n")
        paths[f"glue_{name}"] = glue / name
    (glue / "nan" / "STS-B").mkdir(parents=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    rows = [f"{i}\tg\tf\ty\t{i}\ts\ts\tone\ttwo\tnan" for i in range(20)]
    for split in ("train", "dev"):
        (glue / "nan" / "STS-B" / f"{split}.tsv").write_text("\n".join([header, *rows]) + "\n")
    paths["glue_nan"] = glue / "nan"
    (glue / "latin1" / "RTE").mkdir(parents=True)  # saved as Latin-1, its one bad byte past the first 8 KB
    rows = [f"{i}\tThe cat sat on the mat.\tA cat sat.\tentailment" for i in range(400)]
    rows.append("400\tUn caf\xe9 au lait.\tA coffee.\tentailment")
    for split in ("train", "dev"):
        text = "\n".join(["index\tsentence1\tsentence2\tlabel", *rows]) + "\n"
        (glue / "latin1" / "RTE" / f"{split}.tsv").write_bytes(text.encode("latin-1"))
    paths["glue_latin1"] = glue / "latin1"
    return paths


TINY = [*TINY_DATA, "arch=crammed-bert-tiny", "gpu=cpu", "name=t", "budget=0.001", NO_PROBE,
        "output_dir={root}/out", "cache_dir={cache}"]  # the data of `files`' run, which the resume cases resume
STEPS = TINY + ["train=steps", "train.max_steps=1", "train.batch_size=32", "impl.microbatch_size=16"]  # STEP_RUN's

CASES = [  # (command, arguments, what the one line must contain)
    # paths that are files
    ("pretrain", [*TINY, "output_dir={file}"], "output_dir={file}: {file} is a file, not a directory"),
    ("pretrain", [*TINY, "cache_dir={file}/sub"], "cache_dir={file}/sub: {file} is a file, not a directory"),
    ("prepare_data", ["data=embedded", "cache_dir={file}"], "cache_dir={file}: {file} is a file"),
    ("eval_glue", ["ckpt={good}", "output_dir={file}"], "output_dir={file}: {file} is a file"),
    ("export", ["ckpt={good}", "out={file}/hf"], "out={file}/hf: {file} is a file"),
    # paths this process may not write in
    ("pretrain", [*TINY, "output_dir={readonly}/out"], "output_dir={readonly}/out: cannot write in {readonly}"),
    ("pretrain", [*TINY, "cache_dir={readonly}/cache"], "cache_dir={readonly}/cache: cannot write in {readonly}"),
    ("prepare_data", ["data=embedded", "cache_dir={readonly}/cache"],
     "cache_dir={readonly}/cache: cannot write in {readonly}"),
    ("eval_glue", ["ckpt={good}", "output_dir={readonly}/glue"],
     "output_dir={readonly}/glue: cannot write in {readonly}"),
    ("export", ["ckpt={good}", "out={readonly}/hf"], "out={readonly}/hf: cannot write in {readonly}"),
    # optimizer, schedule and budget outside their domains: refused before any data is prepared
    ("pretrain", [*TINY, "train.optim.lr=0"], "train.optim.lr=0.0 must be positive and finite"),
    ("pretrain", [*TINY, "train.optim.lr=-1"], "train.optim.lr=-1.0 must be positive"),
    ("pretrain", [*TINY, "train.optim.lr=inf"], "train.optim.lr=inf must be positive and finite"),
    ("pretrain", [*TINY, "train.optim.lr=nan"], "train.optim.lr=nan must be positive and finite"),
    ("pretrain", [*TINY, "train.optim.betas=[0.9,1.0]"], "train.optim.betas=[0.9, 1.0] must be two numbers in [0, 1)"),
    ("pretrain", [*TINY, "train.optim.betas=[-0.1,0.9]"], "train.optim.betas=[-0.1, 0.9] must be two numbers"),
    ("pretrain", [*TINY, "train.optim.betas=[0.9]"], "train.optim.betas=[0.9] must be two numbers"),
    ("pretrain", [*TINY, "train.optim.eps=0"], "train.optim.eps=0.0 must be positive"),
    ("pretrain", [*TINY, "train.optim.weight_decay=-0.1"], "train.optim.weight_decay=-0.1 must not be negative"),
    ("pretrain", [*TINY, "train.optim.grad_clip=0"], "train.optim.grad_clip=0.0 must be positive"),
    ("pretrain", [*TINY, "budget=0"], "budget=0.0 must be a positive number"),
    ("pretrain", [*TINY, "budget=inf"], "budget=inf must be a positive number"),
    ("pretrain", [*TINY, "budget=-1"], "budget=-1.0 must be a positive number"),
    ("pretrain", [*TINY, "budget=1e9"], "budget=1e+09 is more than a run can be planned for: at most 1e+06 GPU-hours "
                                        "(114 years of one GPU)"),
    ("pretrain", [*TINY, "train.mlm_rate=0"], "train.mlm_rate=0.0 must mask 1 to 63 of 64 tokens"),
    ("pretrain", [*TINY, "train.mlm_rate=1"], "train.mlm_rate=1.0 must mask 1 to 63"),
    ("pretrain", [*TINY, "train.mlm_rate=0.001"], "train.mlm_rate=0.001 must mask 1 to 63"),
    ("pretrain", [*TINY, "train.batch_size=0"], "train.batch_size=0 must be at least 1"),
    ("pretrain", [*TINY, "train.batch_ramp_fraction=1.5"], "train.batch_ramp_fraction=1.5 must be in [0, 1]"),
    ("pretrain", [*TINY, "train.warmup_fraction=1"], "train.warmup_fraction=1.0 must be in [0, 1)"),
    ("pretrain", [*TINY, "train.max_steps=0"], "train.max_steps=0 must be positive"),
    ("pretrain", [*TINY, "train.progress=epochs"], "train.progress='epochs' must be budget or steps"),
    ("pretrain", [*TINY, "train=steps", "train.max_steps=null"], "train.progress=steps needs train.max_steps"),
    ("pretrain", [*TINY, "train.lr_schedule=step"], "train.lr_schedule='step' is unknown; choose one of"),
    ("pretrain", [*TINY, "train.optim.name=adam"], "train.optim.name='adam' is unknown; choose one of adamw, lamb"),
    ("pretrain", [*TINY, "train.optim.momentum=0.9"],
     "train.optim.momentum is not used by train.optim.name=adamw (it reads lr, betas, eps, weight_decay)"),
    ("pretrain", [*TINY, "train.optim.name=lion", "train.optim.eps=1e-8"], "train.optim.eps is not used by"),
    ("pretrain", [*TINY, "train.optim.name=muon", "train.optim.momentum=1.5"],
     "train.optim.momentum=1.5 must be in [0, 1)"),
    ("pretrain", [*TINY, "train.max_nonfinite_steps=0"], "train.max_nonfinite_steps=0 must be at least 1"),
    ("pretrain", [*TINY, "train.check_nonfinite_every=0"], "train.check_nonfinite_every=0 must be at least 1"),
    ("pretrain", [*TINY, "train.distill.teacher=/no/teacher"], "train.distill.teacher=/no/teacher: no such directory"),
    ("pretrain", [*TINY, "train.distill.alpha=1.5"], "train.distill.alpha=1.5 must be in [0, 1]"),
    ("pretrain", [*TINY, "train.sparsity.method=random"],
     "train.sparsity.method='random' must be one of magnitude, rigl, semi-structured-2:4, lottery"),
    ("pretrain", [*TINY, "train.sparsity.method=semi-structured-2:4"],
     "train.sparsity.method=semi-structured-2:4 needs an NVIDIA GPU of compute capability 8.0 or later"),
    ("pretrain", [*TINY, "train.sparsity.method=semi-structured-2:4", "train.sparsity.density=0.3"],
     "keeps 2 of every 4 weights: train.sparsity.density=0.3 must stay 0.5"),
    ("pretrain", [*TINY, "train.sparsity.method=lottery"],
     "train.sparsity.method=lottery needs train.sparsity.ticket=<the dense run>"),
    ("pretrain", [*TINY, "train.sparsity.ticket={good}"],
     "train.sparsity.method=lottery needs train.sparsity.ticket=<the dense run>, and a ticket is read only"),
    ("pretrain", [*TINY, "train.sparsity.method=lottery", "train.sparsity.ticket={good}", "train.sparsity.rewind=0.5"],
     "kept no checkpoint at that progress; train the dense run with checkpoint.keep_at=[0.5]"),
    ("pretrain", [*TINY, "train.sparsity.method=lottery", "train.sparsity.ticket={good}", "train.seed=7"],
     "that run's train.seed=0 differs from this one's (7)"),
    ("pretrain", [*TINY, "train.sparsity.method=lottery", "train.sparsity.ticket={nan}"],
     "is not the final checkpoint of a finished run"),
    ("pretrain", [*TINY, "checkpoint.keep_at=[1.5]"],
     "checkpoint.keep_at=[1.5] must hold progress fractions in [0, 1)"),
    ("pretrain", [*TINY, "train.sparsity.method=rigl", "train.sparsity.density=1"],
     "train.sparsity.density=1.0 must be in (0, 1)"),
    ("pretrain", [*TINY, "train.optim.name=sophia", "impl.compile=true"],
     "train.optim.name=sophia estimates its Hessian with a second backward pass"),
    ("pretrain", [*TINY, "train.sampling=random"], "train.sampling='random' must be one of sequential, importance"),
    ("pretrain", [*TINY, "train.optim.sam_rho=-0.05"], "train.optim.sam_rho=-0.05 must not be negative (0: off)"),
    ("pretrain", [*TINY, "train.z_loss.weight=-1"], "train.z_loss.weight=-1.0 must be a finite number, 0 or more"),
    ("pretrain", [*TINY, "train.z_loss.weight=nan"], "train.z_loss.weight=nan must be a finite number, 0 or more"),
    ("pretrain", [*TINY, "train.layer_drop.max_rate=1"], "train.layer_drop.max_rate=1.0 must be in [0, 1) (0: off)"),
    ("pretrain", [*TINY, "train.layer_drop.max_rate=0.5", "impl.compile=true"],
     "train.layer_drop would recompile the model for each set of dropped layers: add impl.compile=false"),
    ("pretrain", [*TINY, "train.stacking.stages=[2,1]"], "train.stacking.stages=[2, 1] must be two or more increasing"),
    ("pretrain", [*TINY, "train.stacking.stages=[1,3]"], "train.stacking.stages=[1, 3] must end at arch.num_layers=2"),
    ("pretrain", [*TINY, "train.stacking.at=[0.5]"], "train.stacking.at needs train.stacking.stages"),
    ("pretrain", [*TINY, "train.stacking.stages=[1,2]", "train.stacking.at=[1.5]"],
     "train.stacking.at=[1.5] must hold one fraction in (0, 1) per stage after the first (1), increasing"),
    ("pretrain", [*TINY, "train.stacking.stages=[1,2]", "train.layer_drop.max_rate=0.5"],
     "train.layer_drop and train.stacking both set the layers a step runs: use one at a time"),
    ("pretrain", [*TINY, "impl.num_workers=-1"], "impl.num_workers=-1 must not be negative"),
    ("pretrain", [*TINY, "impl.microbatch_size=0"], "impl.microbatch_size=0 must be positive"),
    ("pretrain", [*TINY, "impl.precision=bf16"], "impl.precision=bf16 is for GPUs"),
    ("pretrain", [*TINY, "impl.deterministic=true"], "impl.deterministic=true needs train.progress=steps"),
    ("pretrain", [*TINY, "checkpoint.interval_minutes=0"], "checkpoint.interval_minutes=0.0 must be positive"),
    ("pretrain", [*TINY, "checkpoint.keep_last=-1"], "checkpoint.keep_last=-1 must not be negative"),
    ("pretrain", [*TINY, "logging.every_steps=0"], "logging.every_steps=0 must be at least 1"),
    ("pretrain", [*TINY, "wandb.mode=cloud"], "wandb.mode='cloud' must be one of disabled, offline, online"),
    ("pretrain", [*TINY, "logging.progress=fancy"], "logging.progress='fancy' must be auto, bar or lines"),
    ("pretrain", [*TINY, "train.validation.fractions=[0.5,1.0]"], "train.validation.fractions=[0.5, 1.0] must each "
                                                                  "be in (0, 1)"),
    ("pretrain", [*TINY, "train.validation.fractions=[0.5,0.5]"],
     "error: train.validation.fractions=[0.5, 0.5] must be increasing, each once: a validation is at one point of "
     "training (e.g. [0.5])"),
    ("pretrain", [*TINY, "train.validation.fractions=[0.75,0.25]"],
     "train.validation.fractions=[0.75, 0.25] must be increasing, each once"),
    ("pretrain", [*TINY, "train.validation.early_stop_loss=5"], "train.validation.early_stop_fraction and "
                                                                "train.validation.early_stop_loss go together"),
    ("pretrain", [*TINY, "train.validation.early_stop_fraction=0.3", "train.validation.early_stop_loss=5"],
     "train.validation.early_stop_fraction=0.3 must be one of train.validation.fractions=[0.25, 0.5, 0.75]"),
    ("pretrain", [*TINY, "train.validation.early_stop_fraction=0.5", "train.validation.early_stop_loss=-1"],
     "train.validation.early_stop_loss=-1.0 must be positive and finite"),
    ("pretrain", [*TINY, "data.validation_rows=-1"], "data.validation_rows=-1 must not be negative"),
    # data and architecture settings
    ("pretrain", [*TINY, "data.max_doc_chars=0"], "data.max_doc_chars=0 must be at least 1"),
    ("pretrain", [*TINY, "data.seq_length=256"], "data.seq_length=256 exceeds arch.max_position_embeddings=128"),
    ("pretrain", [*TINY, "data.seq_length=1"], "error: data.seq_length=1 must be at least 2"),  # alone: no mask rule
    ("pretrain", [*TINY, "data.tokenizer.vocab_size=3"], "data.tokenizer.vocab_size=3 must be between 6 and 65536"),
    ("pretrain", [*TINY, "data.tokenizer.vocab_size=70000"], "data.tokenizer.vocab_size=70000 must be between"),
    ("pretrain", [*TINY, "data.tokenizer.kind=sentencepiece"], "data.tokenizer.kind='sentencepiece' is unknown"),
    ("pretrain", [*TINY, "data.ordering=random"], "data.ordering='random' is unknown; choose one of"),
    ("pretrain", [*TINY, "data.batch_mb=0"], "data.batch_mb=0.0 must be positive"),
    ("pretrain", [*TINY, "arch.num_heads=5"], "arch.hidden_size (128) must be divisible by arch.num_heads (5)"),
    ("pretrain", [*TINY, "arch.ffn=swiglu"], "arch.ffn must be one of glu, gelu, got 'swiglu'"),
    ("pretrain", [*TINY, "arch.dropout=1.5"], "arch.dropout must be in [0, 1), got 1.5"),
    ("pretrain", [*TINY, "arch.num_layers=1000000000"], "arch.num_layers must be at most 1000, got 1000000000"),
    ("pretrain", [*TINY, "arch.hidden_size=65536", "arch.intermediate_size=262144"],
     "memory: the model of arch has 8.62e+10 parameters, whose fp32 weights, gradients and adamw's state need about "
     "1.38 TB, and cpu has "),
    ("pretrain", [*TINY, "arch.global_rope_theta=inf"], "arch.global_rope_theta must be a finite number greater "
                                                        "than 1, got inf"),
    ("pretrain", [*TINY, "arch.local_rope_theta=inf"], "arch.local_rope_theta must be a finite number greater "
                                                       "than 1, got inf"),
    ("pretrain", [*TINY, "arch.global_rope_theta=nan"], "arch.global_rope_theta must be a finite number greater "
                                                        "than 1, got nan"),
    # the command line itself
    ("pretrain", [*TINY, "gpu=tpu"], "unknown gpu=tpu; choose one of 2080ti,"),
    ("pretrain", [*TINY, "arch=crammed"], "unknown arch=crammed; choose one of bert-base,"),
    ("pretrain", [*TINY, "train.optim.learning_rate=1"], "unknown key train.optim.learning_rate — did you mean "
                                                         "train.optim.lr?"),
    ("pretrain", [*TINY, "trian.seed=1"], "unknown key trian.seed — did you mean train.seed?"),
    ("pretrain", [*TINY, "train.microbatch_size=4"], "unknown key train.microbatch_size — did you mean "
                                                     "impl.microbatch_size?"),  # the same name in another section
    ("ablate", ["sweep=smoke", "overrides=[gpu=cpu,eval.tasks=[rte,mrpc]]", "output_dir={root}/ab"],
     "cannot read the override 'overrides=[gpu=cpu,eval.tasks=[rte,mrpc]]': no viable alternative at input '[gpu='; "
     "a list of overrides quotes each one: 'overrides=[\"gpu=cpu\",\"eval.tasks=[rte,mrpc]\"]'"),
    ("pretrain", [*TINY, "+train.foo=1"], "unknown key train.foo"),
    ("pretrain", [*TINY, "eval.epochs=1000000"], "eval.epochs=1000000: eval is null in this config, so it has no "
                                                 "epochs; choose it first, e.g. eval=glue eval.epochs=1000000"),
    ("pretrain", [*TINY, "budget=abc"], "budget=abc: Value 'abc' of type 'str' could not be converted to Float"),
    ("pretrain", [*TINY, "x=["], "cannot read the override 'x=['"),
    # checkpoints to resume from
    ("pretrain", [*STEPS, "resume=/nowhere"], "resume=/nowhere: no such directory"),
    ("pretrain", [*STEPS, "resume={foreign_state}"], "trainer_state.pt is not a trainer state of this version"),
    ("pretrain", [*STEPS, "resume={code_state}"], "holds Python objects other than tensors and plain values"),
    ("pretrain", [*STEPS, "resume={truncated_state}"], "trainer_state.pt: truncated or damaged"),
    ("pretrain", [*STEPS, "resume={nan}"], "model.safetensors holds non-finite weights"),
    ("pretrain", [*STEPS, "resume={truncated}"], "model.safetensors is corrupt or unreadable"),
    ("pretrain", [*STEPS, "resume={good}", "arch.num_layers=3"], "arch.num_layers=3 changes arch.num_layers (2 in the "
                                                                 "run's config.yaml, 3 here); a resume goes on with"),
    # a checkpoint outside a run directory has no config.yaml: its trainer state's fingerprint decides
    ("pretrain", [*STEPS, "resume={bare}", "arch.num_layers=3"], "the settings differ from the checkpoint's "
                                                                 "(arch.num_layers: 2 in the checkpoint, 3 now)"),
    # corpora
    ("pretrain", [*TINY, "data=local", "data.files={corpus}/*.gz"], "matches no files"),
    ("pretrain", [*TINY, "data=local", "data.files={corpus}/binary.txt"],
     "data.filter.max_bad_char_fraction=0.01: every document has more undecodable bytes — the filters keep none of "
     "the whole source (too_short 1, bad_bytes 400)"),
    ("pretrain", [*TINY, "data=local", "data.files={corpus}/empty.txt"],
     "data: data.files ({corpus}/empty.txt) holds no documents (no text to train on)"),
    ("pretrain", [*TINY, "data=local", "data.files={corpus}"], "is a directory; give a glob"),
    ("pretrain", [*TINY, "data=local", "data.files={corpus}/table.csv"], "table.csv has an unsupported type"),
    ("prepare_data", ["data=embedded", "cache_dir={cache}", "data.filter.min_chars=100000000"],
     "data.filter.min_chars=100000000: every document is shorter — the filters keep none of the whole source"),
    ("prepare_data", ["data=embedded", "cache_dir={cache}", "data.sample_by=sentence"], "data.sample_by='sentence' is "
                                                                                       "unknown"),
    ("prepare_data", ["data=nonexistent", "cache_dir={cache}"], "unknown data=nonexistent; choose one of embedded,"),
    ("prepare_data", ["data=local", "cache_dir={cache}"], "data=local needs data.files=<a file, a glob"),
    ("prepare_data", ["data=wikipedia", "cache_dir={cache}", "data.max_tokens=-5"],
     "data.max_tokens=-5 must be null or at least data.seq_length=128 (one row)"),
    ("prepare_data", ["data=fineweb-edu", "cache_dir={cache}", "data.max_documents=0"],
     "data.max_documents=0 must be null or at least 1"),
    ("prepare_data", ["data=embedded", "cache_dir={cache}", "data.hub_revision=main"],
     "data.hub_revision=main is read only with data.source=hub (here data.source=embedded)"),
    ("prepare_data", ["data=wikipedia", "cache_dir={cache}", "data.hub_revision="], "data.hub_revision is empty"),
    ("prepare_data", ["data=wikipedia", "cache_dir={cache}", "data.hub_revision=v2"],
     "data.hub_revision=v2: cannot resolve it for hub dataset wikimedia/wikipedia/20231101.en: OfflineModeIsEnabled"),
    # GLUE
    ("eval_glue", ["ckpt=/nope", "output_dir={root}/g"], "ckpt=/nope: no such directory"),
    ("eval_glue", ["ckpt=hf:/nope", "output_dir={root}/g"], "ckpt=hf:/nope: no such folder"),
    ("eval_glue", ["ckpt=hf:someone/not-on-this-machine", "output_dir={root}/g"],
     "ckpt=hf:someone/not-on-this-machine: cannot load it ("),
    ("eval_glue", ["ckpt=hf:", "output_dir={root}/g"], "ckpt=hf:: name a hub model (e.g. hf:bert-base-uncased)"),
    ("eval_glue", ["ckpt=hf:{good}", "output_dir={root}/g"],
     "ckpt=hf:{good}: this is one of our checkpoints; score it with ckpt={good} (without hf:)"),
    ("eval_glue", ["output_dir={root}/g"], "ckpt is required: add ckpt=... to the command"),
    ("eval_glue", ["ckpt=latest", "runs_dir={corpus}", "output_dir={root}/g"], "ckpt=latest: no run with a complete "
                                                                               "checkpoint"),
    ("eval_glue", ["ckpt={truncated}", "output_dir={root}/g"], "model.safetensors is corrupt or unreadable"),
    ("eval_glue", ["ckpt={no_tokenizer}", "output_dir={root}/g"], "the checkpoint has no tokenizer"),
    ("eval_glue", ["ckpt={nan}", "output_dir={root}/g"], "holds non-finite weights"),
    ("eval_glue", ["ckpt={wrong_shapes}", "output_dir={root}/g"],
     "do not fit the model of {wrong_shapes}/config.json"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.tasks=[rte,cola2]"], "unknown GLUE task 'cola2'"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.tasks=[]"], "eval.tasks is empty"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.seeds=[]"], "eval.seeds is empty"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.lr=0"], "eval.lr=0.0 must be positive and finite"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.betas=[0.9,2]"], "eval.betas=[0.9, 2.0] must be two"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.dropout=1"], "eval.dropout=1.0 must be in [0, 1)"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.max_length=512"], "eval.max_length=512 exceeds the "
                                                                               "checkpoint's 128 positions"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.precision=fp8"], "eval.precision='fp8' must be auto"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.device=tpu"], "eval.device='tpu' is not auto, cpu"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.lr_typo=1"], "unknown key eval.lr_typo — did you "
                                                                          "mean eval.lr?"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.tasks=[rte]", "eval.data_dir={glue_empty}"],
     "RTE/train.tsv: no examples"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.tasks=[rte]", "eval.data_dir={glue_malformed}"],
     "line 2: expected 4 tab-separated fields, found 2"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.tasks=[stsb]", "eval.data_dir={glue_nan}"],
     "STS-B/train.tsv, line 2: label 'nan' is not a score between 0 and 5"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.tasks=[rte]", "eval.data_dir={glue_latin1}"],
     "{glue_latin1}/RTE/train.tsv, line 402: not valid UTF-8 (invalid continuation byte at byte 19932)"),
    ("eval_glue", ["ckpt={good}", "output_dir={root}/g", "eval.tasks=[rte]", f"eval.data_dir={GLUE_DIR}",
                   "eval.max_train_examples=32", "eval.epochs=1", "eval.lr=1e30"],
     "rte: the model's outputs on"),
    # export
    ("export", ["ckpt=/nope", "out={root}/hf"], "ckpt=/nope: no such directory"),
    ("export", ["ckpt={good}"], "out is required"),
    ("export", ["ckpt={nan}", "out={root}/hf"], "holds non-finite weights"),
    ("export", ["ckpt={truncated}", "out={root}/hf"], "model.safetensors is corrupt or unreadable"),
    ("export", ["ckpt={wrong_shapes}", "out={root}/hf"],
     "do not fit the model of {wrong_shapes}/config.json"),
    ("export", ["ckpt={good}", "out={good}"], "export into the checkpoint directory itself"),
    ("export", ["ckpt={root}", "out={root}/hf"], "not a complete checkpoint"),
    # ablate
    ("ablate", ["sweep=nope", "output_dir={root}/ab"],
     "unknown sweep=nope; choose one of data, distillation, ema, levers, lottery, modern-bert, optimizers, recipes, "
     "recipes-20min, recipes-60min, recipes-gpu, schedules, smoke, techniques"),
    ("ablate", ["output_dir={root}/ab"], "You must specify 'sweep', e.g, sweep=<OPTION>"),
    ("ablate", ["sweep=smoke", "sweep.runs.lion=['budget=2']", "output_dir={root}/ab"],
     "run lion sets budget=2; the budget belongs in `base`"),
    ("ablate", ["sweep=smoke", "sweep.runs.wsd=['train.bogus=1']", "output_dir={root}/ab-bogus"],
     "sweep smoke, run wsd: "),
    ("ablate", ["sweep=smoke", 'overrides=["data.files=corpus/train-00[01].txt.gz"]', "output_dir={root}/ab-glob"],
     "(in 'data.files=corpus/train-00[01].txt.gz': quote the value, data.files='corpus/train-00[01].txt.gz', inside "
     "the list's own quotes)"),
]


@pytest.mark.parametrize(("command", "arguments", "message"), CASES,
                         ids=[f"{command}:{' '.join(arguments[-1:])}" for command, arguments, _ in CASES])
def test_bad_input_is_one_line(files, command, arguments, message):
    if files["readonly"] is None and "{readonly}" in " ".join(arguments):
        pytest.skip("no directory here refuses this process's writes")
    names = {name: str(path) for name, path in files.items()}
    code, printed = run_command(command, *(argument.format(**names) for argument in arguments))
    last = printed.strip().splitlines()[-1] if printed.strip() else ""
    assert code == 2, printed
    assert "Traceback" not in printed and "weights_only=False" not in printed
    assert last.startswith("error: ") and message.format(**names) in last, last
