"""Re-record the golden numbers in tests/golden/ on purpose (--check: compare only; the work: cramming.bench.golden).

    python scripts/update_golden.py --glue-dir <GLUE folder>           # after a deliberate change; commit the diff
    python scripts/update_golden.py --check --glue-dir <GLUE folder>   # does this machine reproduce them?
"""

from cramming.cli.update_golden import main

if __name__ == "__main__":
    main()
