"""Re-record the golden numbers in tests/golden/ on purpose (--check: compare only; the work: cramming.bench.golden).

    python scripts/update_golden.py            # after a deliberate change; commit the diff with its reason
    python scripts/update_golden.py --check    # does this machine reproduce them?
"""

from cramming.cli.update_golden import main

if __name__ == "__main__":
    main()
