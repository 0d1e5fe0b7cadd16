"""torch.compile(fullgraph=True) runs the pretraining step (static shapes via masked_positions) like eager,
with no graph break: crammed-bert, and modern-bert's rotary positions and sliding windows."""

import pytest
import torch

from cramming.model import build_mlm_model

from .conftest import arch_config, mlm_batch


@pytest.mark.slow
@pytest.mark.parametrize("name", ["crammed-bert-tiny", "modern-bert-tiny"])
def test_compile_fullgraph_matches_eager(name):
    torch.manual_seed(0)
    model = build_mlm_model(arch_config(name), 256)
    batch = mlm_batch(4, 128, 256)  # modern-bert-tiny: rows longer than half its window, so it masks
    assert torch._dynamo.explain(model)(**batch).graph_break_count == 0
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    eager_out = model(**batch)
    eager_out.loss.backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    compiled_out = compiled(**batch)
    compiled_out.loss.backward()
    torch.testing.assert_close(compiled_out.logits, eager_out.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(compiled_out.loss, eager_out.loss, atol=1e-5, rtol=1e-5)
    for compiled_grad, eager_grad in zip((p.grad for p in model.parameters()), eager_grads):
        torch.testing.assert_close(compiled_grad, eager_grad, atol=1e-4, rtol=1e-3)
