"""impl.deterministic=true: two runs on one machine are bit-identical; it refuses a wall-clock schedule."""

import pytest
import torch
from safetensors.torch import load_file

from cramming.errors import CrammingError
from cramming.pretraining import pretrain
from tests.train.runs import STEP_RUN, compose_config, records


@pytest.mark.slow
def test_two_deterministic_runs_are_bit_identical(shared_cache, tmp_path):
    runs = [pretrain(compose_config(STEP_RUN + ["impl.deterministic=true", f"output_dir={tmp_path / name}"]))
            for name in ("a", "b")]
    assert [r["loss"] for r in records(runs[0])] == [r["loss"] for r in records(runs[1])]
    weights = [load_file(run / "checkpoints/final/model.safetensors") for run in runs]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
    assert not torch.are_deterministic_algorithms_enabled()  # the process-wide setting is restored


def test_deterministic_mode_needs_step_progress(shared_cache, tmp_path):
    cfg = compose_config(STEP_RUN + ["train.progress=budget", "impl.deterministic=true", f"output_dir={tmp_path}"])
    with pytest.raises(CrammingError, match="impl.deterministic=true needs train.progress=steps"):
        pretrain(cfg)
