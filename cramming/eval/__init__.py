"""GLUE evaluation: fine-tune the pretrained encoder on each task with one fixed set of hyperparameters."""
