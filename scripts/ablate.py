"""Equal-budget ablations, one table and one loss plot (the work: cramming.ablate.sweep).

    python scripts/ablate.py sweep=smoke
    python scripts/ablate.py sweep=optimizers
"""

from cramming.cli.ablate import main

if __name__ == "__main__":
    main()
