"""Dense against 2:4 semi-structured FFN matmuls on a GPU (the work: cramming.bench.sparse_speed)."""

from cramming.bench.sparse_speed import main

if __name__ == "__main__":
    main()
