"""Does an export load, with the same outputs, in another transformers version? The work of
scripts/check_export.{sh,py}: `make` (with this project installed) writes a tiny export and the outputs the
installed transformers computes; `check` (in any environment with torch and transformers) computes them
again and compares: token ids, masked-LM logits and every hidden state within 1e-4, and runs fill-mask.
"""

from pathlib import Path

import torch
import transformers
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

TEXTS = ["the cat sat on the mat.", "a short one", "numbers like 1984 and words like transformers"]
TOLERANCE = 1e-4


def make(directory: Path) -> None:
    # here: `check` runs where only torch and transformers are sure to be (other transformers versions)
    from cramming.data.config import NormalizeConfig, TokenizerConfig  # noqa: PLC0415 -- as said above
    from cramming.data.sources import embedded_documents  # noqa: PLC0415 -- as said above
    from cramming.data.tokenizer import as_transformers_tokenizer, train_tokenizer  # noqa: PLC0415 -- as said above
    from cramming.model import build_mlm_model  # noqa: PLC0415 -- as said above
    from cramming.model.checkpoint import save_pretrained  # noqa: PLC0415 -- as said above
    from cramming.model.config import ModelConfig  # noqa: PLC0415 -- as said above
    from cramming.model.export import export_to_transformers  # noqa: PLC0415 -- as said above

    texts = [line for document in embedded_documents() for line in document if line.strip()]
    tokenizer = as_transformers_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=2048), NormalizeConfig()))
    torch.manual_seed(0)
    arch = ModelConfig(name="check", num_layers=2, hidden_size=64, num_heads=4, intermediate_size=256)
    save_pretrained(build_mlm_model(arch, len(tokenizer)).eval(), directory / "checkpoint", tokenizer)
    export_to_transformers(directory / "checkpoint", directory / "export")
    torch.save(outputs(directory / "export"), directory / "reference.pt")
    print(f"export and reference outputs in {directory}")


def outputs(export: Path) -> dict[str, torch.Tensor]:
    """What the export computes for TEXTS, through the Auto classes of the installed transformers."""
    tokenizer = AutoTokenizer.from_pretrained(export, trust_remote_code=True)
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        mlm = AutoModelForMaskedLM.from_pretrained(export, trust_remote_code=True).eval()
        encoder = AutoModel.from_pretrained(export, trust_remote_code=True).eval()
        return {
            "input_ids": inputs["input_ids"],
            "mlm_logits": mlm(**inputs).logits,
            "hidden_states": torch.stack(encoder(**inputs, output_hidden_states=True).hidden_states),
        }


def check(directory: Path) -> int:
    reference = torch.load(directory / "reference.pt")
    found = outputs(directory / "export")
    differences = {}
    for key, expected in reference.items():
        if found[key].shape != expected.shape:
            differences[key] = f"shape {tuple(found[key].shape)} != {tuple(expected.shape)}"
        elif key != "input_ids" and (found[key] - expected).abs().max() > TOLERANCE:
            differences[key] = f"max |difference| {(found[key] - expected).abs().max():.2e}"
        elif key == "input_ids" and not torch.equal(found[key], expected):
            differences[key] = "different token ids"
    fill = transformers.pipeline("fill-mask", model=str(directory / "export"), trust_remote_code=True)
    filled = fill("the cat [MASK] on the mat.")
    verdict = "; ".join(f"{key}: {why}" for key, why in differences.items()) or "same outputs"
    print(f"transformers {transformers.__version__}: {verdict} (token ids, masked-LM logits, "
          f"{len(reference['hidden_states'])} hidden states; fill-mask gave {len(filled)} candidates)")
    return 1 if differences else 0
