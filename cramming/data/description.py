"""The human-readable summary of a prepared dataset, from its meta.json (scripts/prepare_data.py prints it)."""

from cramming.data import store


def describe_dataset(dataset: store.PreparedDataset, reused: bool, seconds: float) -> str:
    meta = dataset.meta
    docs = meta["documents"]
    dropped = ", ".join(f"{reason} {count}" for reason, count in docs["dropped"].items())
    lines = [
        f"dataset   {dataset.path}",
        f"status    {'reused from cache (prepared ' + meta['created'] + ')' if reused else 'prepared now'}"
        + f" in {seconds:.1f} s",
        f"text      {meta['input_megabytes']:.1f} MB read; documents: read {docs['read']}"
        + (f" (+{docs['pieces_from_cuts']} pieces from cutting {docs['cut_for_length']} long ones)"
           if docs["cut_for_length"] else "")
        + f", kept {docs['kept']}, dropped {sum(docs['dropped'].values())} ({dropped})",
        f"tokens    {meta['tokens_packed']:,} in {meta['num_rows']:,} rows of {meta['seq_length']} "
        f"({meta['tail_tokens_dropped']} tail tokens left out); vocabulary {meta['vocab_size']}",
        *_cap_lines(meta),
        *_hub_lines(meta),
        f"order     {meta['config']['ordering']} (seed {meta['config']['seed']})",
        *_trash_line(meta),
        *(f"source    {entry['name']}: weight {entry['weight']:.3f}, documents read {entry['documents_read']}, "
          f"kept {entry['documents_kept']}, tokens {entry['tokens']:,} ({entry['token_share']:.1%})"
          for entry in meta.get("sources", [])),
        f"speed     {meta['megabytes_per_second']:.2f} MB/s end to end when prepared "
        f"({meta['seconds']['total']:.1f} s, of which tokenizer training "
        f"{meta['seconds']['tokenizer_training']:.1f} s)",
    ]
    return "\n".join(lines)


def _trash_line(meta: dict) -> list[str]:
    trash = meta.get("trash_filter", {})
    if trash.get("median_ratio") is None:
        return []
    return [f"trash     cutoff {trash['cutoff']:.4f} tokens per character = {meta['config']['filter']['trash_cutoff']} "
            f"x the median {trash['median_ratio']:.4f}"]


def _cap_lines(meta: dict) -> list[str]:
    """A slice, not the whole source: which cap stopped the reading, if one did."""
    config, lines = meta["config"], []
    read = {"max_documents": meta["documents"]["read"],
            "max_tokens": meta["tokens_packed"] + meta["tail_tokens_dropped"]}
    for key, amount in read.items():
        if config.get(key) is not None:
            lines.append(f"cap       data.{key}={config[key]:,}: "
                         + ("reached: a slice of the source" if amount >= config[key] else "not reached"))
    return lines


def _hub_lines(meta: dict) -> list[str]:
    hub = meta.get("hub")
    if hub is None:
        return []
    name = hub["path"] + (f"/{hub['name']}" if hub["name"] else "")
    asked = f" (data.hub_revision={hub['revision']})" if hub["revision"] is not None else " (default branch)"
    commit = f"at commit {hub['commit']}" if hub["commit"] else "commit not recorded: the hub did not answer"
    return [f"hub       {name}, split {hub['split']}, {commit}{asked}"]
