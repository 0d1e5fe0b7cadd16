"""Corpus preparation against bare `tokenizers` encoding of the same files.

    python scripts/bench_prepare.py --files '<corpus folder>/train-00[0-4].txt.gz' \
        --files '<corpus folder>/train-*.txt.gz'

For each file set, in separate processes one after the other: `prepare_data.py` (as `python -m
cramming.cli.prepare_data`) into an empty cache (tokenizer training, filters, encoding, packing, ordering), then a
bare `encode_batch_fast` of the same files' lines in `data.batch_mb`-sized batches with the tokenizer that run
trained (read, decompress, encode: nothing else). Prints wall time and peak resident memory (the process's own
maxrss) of each, and the ratio of preparation to bare encoding: the overhead of everything the pipeline adds.
"""

import argparse
import glob
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer

from cramming.data.sources import text_size_bytes
from cramming.errors import CrammingError, exit_on_user_error


def run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process; its output is passed through."""
    started = time.perf_counter()
    process = subprocess.Popen(command)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise CrammingError(f"{' '.join(command[1:4])} ... failed with status {status}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def bare_encode(tokenizer_file: str, files: list[str], batch_mb: float) -> None:
    """What the pipeline's encoding costs at minimum: the same lines through the same tokenizer."""

    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokens = 0
    for path in files:
        batch, size = [], 0
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") if path.endswith(".gz") else open(path) as f:
            for line in f:
                if line.strip():
                    batch.append(line.rstrip("\n"))
                    size += len(line)
                if size >= batch_mb * 1e6:
                    tokens += sum(len(e.ids) for e in tokenizer.encode_batch_fast(batch, add_special_tokens=False))
                    batch, size = [], 0
        if batch:
            tokens += sum(len(e.ids) for e in tokenizer.encode_batch_fast(batch, add_special_tokens=False))
    print(f"bare encoding: {tokens} tokens", flush=True)


@exit_on_user_error
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", action="append", required=True, help="a glob of corpus files; repeat for more sets")
    parser.add_argument("--batch-mb", type=float, default=2.0, help="data.batch_mb of the pipeline")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another prepare_data.py override (e.g. data.tokenizer.vocab_size=4096); repeatable")
    parser.add_argument("--bare", nargs="+", help=argparse.SUPPRESS)  # internal: TOKENIZER_FILE FILE...
    args = parser.parse_args()
    if args.bare:
        bare_encode(args.bare[0], args.bare[1:], args.batch_mb)
        return

    results = []
    for pattern in args.files:
        files = sorted(glob.glob(pattern))
        if not files:
            raise CrammingError(f"no files match {pattern}")
        megabytes = sum(text_size_bytes(f) for f in files) / 1e6
        with tempfile.TemporaryDirectory() as cache:
            prepare = run([sys.executable, "-m", "cramming.cli.prepare_data", "data=local", f"data.files={pattern}",
                           f"data.batch_mb={args.batch_mb}", f"cache_dir={cache}", *args.set])
            tokenizer_file = next(Path(cache).rglob("tokenizer.json"))
            bare = run([sys.executable, "-m", "cramming.bench.prepare_speed", "--files", pattern,
                        "--batch-mb", str(args.batch_mb), "--bare", str(tokenizer_file), *files])
        results.append((pattern, megabytes, prepare, bare))

    print("\n| files | input MB | prepare_data.py wall | peak RSS | bare encode_batch wall | peak RSS | ratio |")
    print("|---|---|---|---|---|---|---|")
    for pattern, megabytes, (prep_s, prep_mb), (bare_s, bare_mb) in results:
        print(f"| `{pattern}` | {megabytes:.0f} | {prep_s:.1f} s | {prep_mb:.0f} MB | {bare_s:.1f} s "
              f"| {bare_mb:.0f} MB | {prep_s / bare_s:.2f}x |")


if __name__ == "__main__":
    main()
