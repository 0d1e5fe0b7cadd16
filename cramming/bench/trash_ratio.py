"""Tokens per character against vocabulary size: what the trash filter (data.filter.trash_cutoff) sees.

    python scripts/bench_trash_ratio.py --train '<corpus folder>/train-000.txt.gz' \
        --measure '<corpus folder>/valid-000.txt.gz' --vocab-sizes 4096 8192 16384 32768

For each vocabulary size, trains the pipeline's tokenizer (data.tokenizer.*, its first train_sample_mb of
the --train files that pass the filters, exactly as preparation does), then encodes every document of the
--measure files that passes the tokenizer-free filters, and prints the documents' tokens-per-character
distribution: the median (each document weighted by its length, as trash_cutoff_scaling=median measures
it), the 90th and 99th percentiles, and the share of documents (and of their characters) that a fixed
cutoff and a median-relative cutoff would drop.
"""

import argparse

import numpy as np

from cramming.data.config import FilterConfig, TokenizerConfig
from cramming.data.filters import DocumentFilter, median_tokens_per_char
from cramming.data.packing import TextBatch
from cramming.data.prepare import _tokenizer_sample
from cramming.data.sources import DataConfig, source_from_config
from cramming.data.tokenizer import train_tokenizer
from cramming.errors import exit_on_user_error


def document_ratios(cfg: DataConfig, tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, characters) of every document of `cfg`'s files that passes the tokenizer-free filters."""
    doc_filter = DocumentFilter(cfg.filter, cfg.max_doc_chars)
    tokens, chars, batch = [], [], TextBatch()

    def flush(batch: TextBatch) -> None:
        encodings = tokenizer.encode_batch_fast(batch.lines, add_special_tokens=False)
        line_tokens = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
        tokens.append(np.add.reduceat(line_tokens, np.cumsum([0] + batch.lines_per_doc[:-1])))
        chars.append(np.asarray(batch.chars_per_doc))

    for document in source_from_config(cfg).documents():
        for part in doc_filter(document):
            batch.add(part)
        if sum(batch.chars_per_doc) > 2e6:
            flush(batch)
            batch = TextBatch()
    if batch.lines:
        flush(batch)
    return np.concatenate(tokens), np.concatenate(chars)


@exit_on_user_error
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="files (a glob) the tokenizer is trained on")
    parser.add_argument("--measure", required=True, help="files (a glob) whose documents are measured")
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--kind", default="wordpiece", help="data.tokenizer.kind")
    parser.add_argument("--sample-by", default="paragraph", help="data.sample_by: what a document is")
    parser.add_argument("--train-sample-mb", type=float, default=16.0, help="data.tokenizer.train_sample_mb")
    parser.add_argument("--cutoff", type=float, default=0.3, help="the fixed cutoff, tokens per character")
    parser.add_argument("--relative", type=float, default=1.3, help="the median-relative cutoff, x the median")
    args = parser.parse_args()

    filters = FilterConfig(trash_cutoff=None)
    print(f"documents: sample_by={args.sample_by}; filters: min_chars {filters.min_chars}, dedup, bad bytes")
    print(f"{'vocab':>6} {'docs':>7} {'median':>7} {'p90':>7} {'p99':>7} "
          f"{'>' + str(args.cutoff) + ' docs':>12} {'chars':>7} "
          f"{'>' + str(args.relative) + 'xmed docs':>14} {'chars':>7}")
    for vocab_size in args.vocab_sizes:
        tokenizer_cfg = TokenizerConfig(kind=args.kind, vocab_size=vocab_size, train_sample_mb=args.train_sample_mb)
        train = DataConfig(name="train", source="local", files=args.train, sample_by=args.sample_by,
                           filter=filters, tokenizer=tokenizer_cfg)
        sample = _tokenizer_sample(train, source_from_config(train), DocumentFilter(filters, train.max_doc_chars))
        tokenizer = train_tokenizer(sample.lines, tokenizer_cfg, train.normalize)
        measure = DataConfig(name="measure", source="local", files=args.measure, sample_by=args.sample_by,
                             filter=filters)
        tokens, chars = document_ratios(measure, tokenizer)
        ratios = tokens / np.maximum(chars, 1)
        median = median_tokens_per_char(tokens, chars)
        fixed, relative = ratios > args.cutoff, ratios > args.relative * median
        print(f"{vocab_size:>6} {len(ratios):>7} {median:>7.4f} {np.percentile(ratios, 90):>7.4f} "
              f"{np.percentile(ratios, 99):>7.4f} {fixed.mean():>12.2%} {chars[fixed].sum() / chars.sum():>7.2%} "
              f"{relative.mean():>14.2%} {chars[relative].sum() / chars.sum():>7.2%}", flush=True)


if __name__ == "__main__":
    main()
