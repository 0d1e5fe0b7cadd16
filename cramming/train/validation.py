"""MLM loss on rows that training has not read: the last positions of the stored order."""

import torch

from cramming.data.mlm import MLMCollator, PackedRows
from cramming.data.store import PreparedDataset


@torch.no_grad()
def validation_loss(model: torch.nn.Module, dataset: PreparedDataset, rows: int, mlm_rate: float, seed: int,
                    batch_size: int = 32) -> float:
    """Mean loss over the masked tokens of the last `rows` rows of the stored order, masked as training
    masks them (seeded by position), with the model in eval mode. Held out only while training has
    read fewer than num_rows - rows rows (it reads the order from the start)."""
    packed = PackedRows(dataset)
    collate = MLMCollator(dataset.meta["vocab_size"], mlm_rate=mlm_rate, seed=seed)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, targets = 0.0, 0
    for start in range(len(packed) - rows, len(packed), batch_size):
        batch = collate(packed.batch(start, min(batch_size, len(packed) - start)))
        batch = {key: value.to(device) for key, value in batch.items()}
        count = int((batch["labels"] != -100).sum())
        total += model(**batch).loss.item() * count  # the loss is a mean over this batch's targets
        targets += count
    model.train(was_training)
    return total / targets
