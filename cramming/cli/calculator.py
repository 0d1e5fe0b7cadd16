"""Which encoder shape makes the best use of a budget on a GPU: `python scripts/calculator.py` or
`cramming-calculator` (cramming.calculator.recommend does the work).

    python scripts/calculator.py budget=24 gpu=2080ti
    python scripts/calculator.py budget=0.5 gpu=cpu fit=true check=true
    python scripts/calculator.py budget=24 gpu=a6000 runs='outputs/*/*/metrics.jsonl'
"""

import sys

import hydra
from omegaconf import OmegaConf

from cramming import CONFIG_DIR
from cramming.calculator.config import CalculatorConfig  # registers the config schema
from cramming.cli import quote_path_overrides
from cramming.errors import exit_on_user_error
from cramming.hardware import known_profiles


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="calculator")
@exit_on_user_error
def _calculate(cfg: CalculatorConfig) -> None:
    from cramming.calculator.recommend import recommend

    recommend(OmegaConf.to_object(cfg))


def reject_unknown_gpu(argv: list[str]) -> None:
    """`gpu=` names a profile group; say which exist in one line rather than in Hydra's composition error."""
    known = ["auto", *known_profiles()]
    for argument in argv[1:]:
        key, sep, value = argument.partition("=")
        if sep and key == "gpu" and value not in known:
            print(f"error: unknown gpu={value!r}; known: {', '.join(known)}", file=sys.stderr)
            sys.exit(2)


def main() -> None:
    reject_unknown_gpu(sys.argv)
    quote_path_overrides(keys=("runs",))
    _calculate()


if __name__ == "__main__":
    main()
