"""data.source=hub (data=wikipedia, data=fineweb-edu): a dataset on the Hugging Face hub, streamed.

`data.hub_revision` (a branch, tag or commit) is resolved to its commit once, through the hub's API, and that
commit is what `datasets` loads: the tokenizer's sample and the main pass read the same text even if the branch
moves in between, and meta.json records what was read. Without a revision the default branch's commit is
recorded when the hub answers; offline (the datasets cache) it is not, and reading works as before.
"""

import logging
import re
from collections.abc import Iterator
from typing import Optional

from cramming.data.config import DataBaseConfig
from cramming.data.local_source import READ_BATCH_ROWS
from cramming.data.source_base import Document, Source, split_records
from cramming import hub
from cramming.errors import CrammingError, require
from cramming.plugins import Setting

log = logging.getLogger(__name__)
COMMIT = re.compile(r"[0-9a-f]{40}")  # a full commit sha names itself: no need to ask the hub


class HubSource(Source):
    name = "hub"
    settings = (
        # load_dataset(hub_path, hub_name, split=split, streaming=streaming, revision=the commit of hub_revision)
        Setting("data.hub_path", Optional[str]),
        Setting("data.hub_name", Optional[str]),
        # a branch, tag or commit sha of the dataset (null: its default branch); the commit it resolves to is
        # what both passes read, and is recorded in meta.json (`hub`) and the summary
        Setting("data.hub_revision", Optional[str]),
        Setting("data.split", str, "train"),
        Setting("data.streaming", bool, True),
    )

    def __init__(self, cfg: DataBaseConfig):
        super().__init__(cfg)
        self._commit: str | None = None
        self._resolved = False

    @classmethod
    def check(cls, cfg: DataBaseConfig) -> None:
        if cfg.source != cls.name:
            require([(cfg.hub_revision is None,
                      f"data.hub_revision={cfg.hub_revision} is read only with data.source=hub "
                      f"(here data.source={cfg.source})")])
            return
        require([
            (bool(cfg.hub_path), "data.source=hub needs data.hub_path (a dataset name on the hub)"),
            (cfg.hub_revision is None or bool(cfg.hub_revision.strip()),
             "data.hub_revision is empty: give a branch, tag or commit of the hub dataset, or null for its default "
             "branch"),
        ])

    @classmethod
    def build(cls, cfg: DataBaseConfig) -> "HubSource":
        return cls(cfg)

    @property
    def where(self) -> str:
        return f"hub dataset {self.cfg.hub_path}" + (f"/{self.cfg.hub_name}" if self.cfg.hub_name else "")

    def fingerprint(self) -> dict:
        return {"hub": [self.cfg.hub_path, self.cfg.hub_name, self.cfg.split, self.cfg.text_column]}

    def commit(self) -> str | None:
        """The commit read: data.hub_revision's (or the default branch's), asked of the hub once; None when no
        revision was given and the hub cannot be reached."""
        if self._resolved:
            return self._commit
        requested = self.cfg.hub_revision
        offline = hub.offline()
        if requested is not None and COMMIT.fullmatch(requested):
            self._commit = requested
        else:
            try:
                from huggingface_hub import HfApi  # noqa: PLC0415 -- the hub client, only to resolve a revision

                self._commit = HfApi().dataset_info(self.cfg.hub_path, revision=requested).sha
            except Exception as error:  # offline, unknown dataset or revision: the hub client's message says which
                if requested is not None:
                    raise CrammingError(f"data.hub_revision={requested}: cannot resolve it for {self.where}: "
                                        f"{type(error).__name__}: {error}{_out_of_reach(offline)}") from None
                log.info("%s: its commit is not recorded (the hub did not answer: %s)", self.where,
                         type(error).__name__)
        self._resolved = True
        return self._commit

    def provenance(self) -> dict:
        return {"hub": {"path": self.cfg.hub_path, "name": self.cfg.hub_name, "split": self.cfg.split,
                        "revision": self.cfg.hub_revision, "commit": self.commit()}}

    def documents(self) -> Iterator[Document]:
        import datasets  # noqa: PLC0415 -- seconds to import: only when a hub corpus is read

        cfg = self.cfg
        commit = self.commit()
        pinned = {"revision": commit} if commit else {}  # no revision argument at all offline, as before
        try:
            stream = datasets.load_dataset(cfg.hub_path, cfg.hub_name, split=cfg.split, streaming=cfg.streaming,
                                           **pinned)
        except Exception as error:  # offline, unknown name, no such split: the hub client's own message says which
            raise CrammingError(f"cannot load {self.where}: {type(error).__name__}: {error}"
                                f"{_out_of_reach(hub.offline())}") from None
        yield from split_records(stream.iter(batch_size=READ_BATCH_ROWS), cfg.text_column, self.where)


def _out_of_reach(offline: str | None) -> str:
    """What an error adds when the hub is out of reach: why, and the sources that read no network."""
    return f" (the hub is out of reach: {offline}; data=embedded and data=local read no network)" if offline else ""
