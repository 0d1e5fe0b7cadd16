"""The measured peak's GEMMs are the training step's: modern-bert's GeGLU widths and its head transform."""

from cramming.bench.peak import model_gemm_shapes
from tests.model.conftest import arch_config


def test_the_gemm_shapes_follow_the_layout():
    tokens, masked = 2 * 512, 2 * 128
    shapes = dict(model_gemm_shapes(arch_config("modern-bert"), 2, 512, 32768, 0.25))
    # each forward product (M, K, N) with its two backward products (M, N, K) and (K, M, N)
    for forward, count in [((tokens, 768, 2304), 22), ((tokens, 1152, 768), 22), ((tokens, 768, 768), 22),
                           ((masked, 768, 768), 1), ((masked, 768, 32768), 1)]:
        m, k, n = forward
        assert shapes[forward] == shapes[(m, n, k)] == shapes[(k, m, n)] == count
    crammed = dict(model_gemm_shapes(arch_config("crammed-bert"), 2, 128, 32768, 0.25))
    assert (64, 768, 768) not in crammed and crammed[(64, 768, 32768)] == 1  # no head transform
