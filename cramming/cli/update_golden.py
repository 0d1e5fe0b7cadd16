"""Re-record the golden numbers in tests/golden/ on purpose, or check this machine against them:
`python scripts/update_golden.py [--check] --glue-dir <GLUE folder>`. Commit a changed golden file with the
reason in the message."""

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import torch

from cramming.bench import golden
from cramming.errors import CrammingError, exit_on_user_error
from cramming.eval.tasks.glue import classic_glue_dir
from cramming.provenance import provenance

CHECKOUT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = CHECKOUT / "tests" / "golden"


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored numbers; write nothing")
    parser.add_argument("--glue-dir", type=Path, help="classic GLUE TSV directory (RTE)")
    args = parser.parse_args(argv)
    if not GOLDEN_DIR.is_dir():
        raise CrammingError(f"{GOLDEN_DIR} not found: run this from a checkout of the repository")
    if not (classic_glue_dir(args.glue_dir) / "RTE").is_dir():
        raise CrammingError(f"--glue-dir {args.glue_dir} has no RTE/ folder (the GLUE golden run fine-tunes on RTE)")
    torch.set_flush_denormal(True)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)  # the runs' progress lines
    print(f"the golden runs: {golden.CHECKED_STEPS[-1]} steps of pretraining, then RTE fine-tuning (20 s to 1.5 "
          "minutes on 2 idle CPU cores, by the machine; longer on a busy one)", flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        pretraining, checkpoint = golden.run_pretraining(Path(workdir))
        glue = golden.run_glue_subset(checkpoint, args.glue_dir, Path(workdir))
    recorded_with = provenance(torch.device("cpu"))
    differences = []
    for name, numbers in ((golden.PRETRAIN_FILE, pretraining), (golden.GLUE_FILE, glue)):
        old = golden.read(GOLDEN_DIR, name) if (GOLDEN_DIR / name).exists() else {}
        found = golden.mismatches(old, numbers) if old else ["no golden numbers yet"]
        differences += found
        for line in found:
            print(f"{name}: {line}")
        if not args.check:
            golden.write(GOLDEN_DIR, name, numbers, recorded_with)
    if args.check:
        print("matches the golden numbers" if not differences else f"{len(differences)} differences")
        sys.exit(1 if differences else 0)
    print(f"wrote {GOLDEN_DIR / golden.PRETRAIN_FILE} and {GOLDEN_DIR / golden.GLUE_FILE}; review the diff")


if __name__ == "__main__":
    main()
