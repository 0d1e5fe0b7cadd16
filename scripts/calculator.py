"""Which encoder shape makes the best use of a budget on a GPU (the work: cramming.calculator.recommend).

    python scripts/calculator.py budget=24 gpu=2080ti
    python scripts/calculator.py budget=0.5 gpu=cpu fit=true check=true
"""

from cramming.cli.calculator import main

if __name__ == "__main__":
    main()
