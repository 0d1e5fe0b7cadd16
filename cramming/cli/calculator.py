"""Which encoder shape makes the best use of a budget on a GPU: `python scripts/calculator.py` or
`cramming-calculator` (cramming.calculator.recommend does the work).

    python scripts/calculator.py budget=24 gpu=2080ti
    python scripts/calculator.py budget=0.5 gpu=cpu fit=true check=true
    python scripts/calculator.py budget=24 gpu=a6000 runs='outputs/*/*/metrics.jsonl'
"""

from omegaconf import OmegaConf

from cramming.calculator.config import CalculatorConfig  # registers the config schema
from cramming.cli import hydra_command


@hydra_command("calculator", CalculatorConfig, directories=("output_dir", "cache_dir"), path_keys=("runs",))
def main(cfg: CalculatorConfig) -> None:
    from cramming.calculator.recommend import recommend  # noqa: PLC0415 -- scipy, matplotlib: not on --help

    recommend(OmegaConf.to_object(cfg))


if __name__ == "__main__":
    main()
