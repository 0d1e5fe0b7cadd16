"""The model's FLOPs per token, what MFU, the budget calculator and the benchmark count."""


def training_flops_per_token(cfg, vocab_size: int, seq_length: int, mlm_rate: float) -> float:
    """FLOPs of one training step (forward + backward = 3 x forward) per input token.

    With sparse prediction the MLM head runs on round(mlm_rate * seq_length) positions of each row only.
    A sliding-window layer counts all T keys per query, as a global one: its window is a mask on the full
    T x T product, which is what scaled_dot_product_attention computes (no kernel here skips masked blocks).
    Rotary positions are elementwise, not counted.
    """
    H, T = cfg.hidden_size, seq_length
    ffn_width = cfg.intermediate_size // 2 if cfg.ffn == "glu" else cfg.intermediate_size
    # qkv, attention output (dense), intermediate, output: multiply-accumulates per token
    layer_macs = 3 * H * H + H * H + H * cfg.intermediate_size + ffn_width * H
    attention_macs = 2 * T * H  # q @ k^T and probs @ v, per query token
    head_macs = (H * H if cfg.head_transform else 0) + H * vocab_size
    predicted_fraction = round(mlm_rate * T) / T if cfg.sparse_prediction else 1.0
    forward_macs = cfg.num_layers * (layer_macs + attention_macs) + predicted_fraction * head_macs
    return 3 * 2 * forward_macs
