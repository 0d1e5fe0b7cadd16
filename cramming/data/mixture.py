"""Data mixtures: `data=mixture data.sources='[{files: a/*.txt.gz, weight: 0.7}, {files: b.jsonl, weight: 0.3}]'`.

The sources' documents are interleaved so that every prefix of the stream holds each source's share of
the characters, weight / sum of weights, to within one document: the next document always comes from the
source furthest behind its share (the one with the least characters per unit of weight; ties go to the
earlier source). Characters, not documents, because the sources' documents differ in size by orders of
magnitude (a Gutenberg book against a short web page), and characters are what becomes tokens. No random
draw is involved, so the stream is the same in every process and on every machine, and the proportions
hold exactly rather than in expectation — in the tokenizer's training sample and under data.max_documents
too.

The stream stops when the source that is due runs out: the dataset then holds the weighted proportions
over its whole length. Continuing with the others would turn the tail into a single-source corpus that
a shuffled order spreads over all of training, silently changing the mixture the weights ask for; the
summary records how much of each source was read, so weights can be set to the sources' sizes to use
all of them.
"""

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from cramming.data.config import DataBaseConfig
from cramming.data.local_source import LocalSource, listed
from cramming.data.source_base import SAMPLE_BY, Document, Source
from cramming.errors import CrammingError, require
from cramming.plugins import Setting


def source_name(spec) -> str:
    if spec.name:
        return str(spec.name)
    files = spec.files if isinstance(spec.files, str) else ",".join(map(str, spec.files))
    return files


@dataclass
class MixtureSourceConfig:
    """One source of a mixture (data=mixture): local files, and their share of the mixture's text."""

    files: Any = None  # a path, a glob, or a list of them, as data.files
    weight: float = 1.0  # share of the characters, relative to the other sources' weights
    name: Optional[str] = None  # its label in the summary; null: the files as given
    text_column: Optional[str] = None  # null: data.text_column
    sample_by: Optional[str] = None  # null: data.sample_by


class Mixture(Source):
    """Several local sources read as one stream, interleaved by characters (module docstring)."""

    name = "mixture"
    # the sources and their weights; documents are interleaved by characters
    settings = (Setting("data.sources", list[MixtureSourceConfig], []),)

    def __init__(self, cfg: DataBaseConfig, components: list[LocalSource], names: list[str], weights: list[float]):
        super().__init__(cfg)
        self.components, self.names = components, names
        self.weights = weights  # normalized to sum to 1

    @classmethod
    def check(cls, cfg: DataBaseConfig) -> None:
        """The mixture's settings, one line naming the first bad one."""
        if cfg.source != cls.name:
            require([(not cfg.sources,
                      f"data.sources is set but data.source={cfg.source}: mixtures need data=mixture")])
            return
        if not cfg.sources:
            raise CrammingError("data=mixture needs data.sources='[{files: a.txt.gz, weight: 0.7}, {files: b.jsonl, "
                                "weight: 0.3}]'")
        if cfg.files not in (None, "???", "", []):
            raise CrammingError("data=mixture reads data.sources; data.files is for data=local (give each source its "
                                "files)")
        names = []
        for index, spec in enumerate(cfg.sources):
            where = f"data.sources[{index}]"
            if spec.files in (None, "???", "", []):
                raise CrammingError(f"{where} needs files: a file, a glob, or a list of them")
            weight = spec.weight
            if not (isinstance(weight, (int, float)) and 0 < weight < float("inf")):
                raise CrammingError(f"{where}.weight={weight} must be a positive number")
            if spec.sample_by is not None and spec.sample_by not in SAMPLE_BY:
                raise CrammingError(f"{where}.sample_by={spec.sample_by!r} is unknown; choose one of "
                                    f"{', '.join(SAMPLE_BY)}")
            names.append(source_name(spec))
        duplicate = next((name for name in names if names.count(name) > 1), None)
        if duplicate is not None:
            raise CrammingError(f"data.sources: two sources are named {duplicate!r}; give each a distinct name")

    @classmethod
    def build(cls, cfg: DataBaseConfig) -> "Mixture":
        components, names, weights = [], [], []
        for spec in cfg.sources:
            component = dataclasses.replace(  # the section read as data=local (its schema holds every kind's keys)
                cfg, source="local", files=spec.files, sources=[],
                text_column=spec.text_column if spec.text_column is not None else cfg.text_column,
                sample_by=spec.sample_by if spec.sample_by is not None else cfg.sample_by,
            )
            try:
                components.append(LocalSource.build(component))
            except CrammingError as problem:  # name the source, not data.files
                raise CrammingError(str(problem).replace("data.files", f"data.sources[{len(names)}].files")) from None
            names.append(source_name(spec))
            weights.append(float(spec.weight))
        total = sum(weights)
        return cls(cfg, components, names, [weight / total for weight in weights])

    @property
    def where(self) -> str:
        return "data.sources (" + "; ".join(f"{name}: {listed(component.files)}" for name, component in
                                            zip(self.names, self.components)) + ")"

    def input_files(self) -> list[str]:
        return [path for component in self.components for path in component.input_files()]

    def fingerprint(self) -> dict:
        return {"mixture": [component.fingerprint() for component in self.components]}

    def total_bytes(self) -> int:
        """An estimate for the progress bar: where the first source is expected to run out."""
        return int(min(component.total_bytes() / weight for component, weight in zip(self.components, self.weights)))

    def documents(self) -> Iterator[Document]:
        for _, document in self.tagged_documents():
            yield document

    def tagged_documents(self) -> Iterator[tuple[int, Document]]:
        """(index of the source, document), interleaved by characters; stops when the source due runs out."""
        streams = [component.documents() for component in self.components]
        characters = [0] * len(streams)
        while True:
            due = min(range(len(streams)), key=lambda i: (characters[i] / self.weights[i], i))
            document = next(streams[due], None)
            if document is None:
                return
            characters[due] += sum(map(len, document)) + max(len(document) - 1, 0)  # newlines joining the lines
            yield due, document

    def describe(self) -> list[dict]:
        """Per source: name, files, weight (normalized), for the dataset's record."""
        return [
            {"name": name, "weight": round(weight, 6), "files": [os.path.abspath(path) for path in component.files]}
            for name, weight, component in zip(self.names, self.weights, self.components)
        ]
