"""Crammed BERT: pretrain a BERT-class encoder on one GPU under a fixed budget."""

__version__ = "0.1.0"
