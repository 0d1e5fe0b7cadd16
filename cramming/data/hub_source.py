"""data.source=hub (data=wikipedia, data=fineweb-edu): a dataset on the Hugging Face hub, streamed."""

from collections.abc import Iterator

from cramming.data.config import DataConfig
from cramming.data.local_source import READ_BATCH_ROWS
from cramming.data.source_base import Document, Source, split_records
from cramming.errors import CrammingError


class HubSource(Source, kind="hub"):
    @classmethod
    def build(cls, cfg: DataConfig) -> "HubSource":
        if not cfg.hub_path:
            raise CrammingError("data.source=hub needs data.hub_path (a dataset name on the hub)")
        return cls(cfg)

    def fingerprint(self) -> dict:
        return {"hub": [self.cfg.hub_path, self.cfg.hub_name, self.cfg.split, self.cfg.text_column]}

    def documents(self) -> Iterator[Document]:
        import datasets

        cfg = self.cfg
        where = f"hub dataset {cfg.hub_path}" + (f"/{cfg.hub_name}" if cfg.hub_name else "")
        try:
            stream = datasets.load_dataset(cfg.hub_path, cfg.hub_name, split=cfg.split, streaming=cfg.streaming)
        except Exception as error:  # offline, unknown name, no such split: the hub client's own message says which
            raise CrammingError(f"cannot load {where}: {type(error).__name__}: {error}") from None
        yield from split_records(stream.iter(batch_size=READ_BATCH_ROWS), cfg.text_column, where)
