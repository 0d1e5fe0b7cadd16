"""Pretraining data: sources, normalization and filters, tokenizer, packing, storage, MLM batches."""
