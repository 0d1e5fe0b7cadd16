"""Fine-tune a pretrained checkpoint on GLUE with the fixed protocol (the entry point: cramming.cli.eval_glue).

    python eval_glue.py ckpt=outputs/<name>/<timestamp>/checkpoints/final
    python eval_glue.py ckpt=latest eval.tasks=[rte,mrpc] eval.data_dir=<GLUE folder>
"""

from cramming.cli.eval_glue import main

if __name__ == "__main__":
    main()
