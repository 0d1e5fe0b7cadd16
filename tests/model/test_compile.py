"""torch.compile(fullgraph=True) runs the pretraining step (static shapes via masked_positions) like eager."""

import torch

from cramming.model import build_mlm_model

from .conftest import arch_config, mlm_batch


def test_compile_fullgraph_matches_eager():
    torch.manual_seed(0)
    model = build_mlm_model(arch_config("crammed-bert-tiny"), 256)
    compiled = torch.compile(model, fullgraph=True)
    batch = mlm_batch(4, 32, 256)
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
