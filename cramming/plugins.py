"""The config keys a plug-in owns (a training technique, an optimizer, a task, a data source): declared in its
own file as `Setting`s at the paths users type them, and added by the registry to the schema of the section they
live in, so a new plug-in brings its keys without a line in the schema's file."""

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Setting:
    """A config key a plug-in owns: its path as users type it (`train.layer_drop`, `impl.fp8`), its type and
    default. A dataclass type is a group of keys, its fields, with their defaults."""

    path: str
    type: Any
    default: Any = dataclasses.field(default=None, hash=False)  # a list default is copied for each config

    @property
    def section(self) -> str:
        """The config section it lives in (`train` for `train.layer_drop`)."""
        return self.path.rpartition(".")[0]

    def as_field(self) -> tuple[str, Any, dataclasses.Field]:
        """(name, type, field) for dataclasses.make_dataclass, under the section its path names."""
        name = self.path.rpartition(".")[2]
        if dataclasses.is_dataclass(self.type):
            return name, self.type, dataclasses.field(default_factory=self.type)
        if isinstance(self.default, list):
            return name, self.type, dataclasses.field(default_factory=lambda: list(self.default))
        return name, self.type, dataclasses.field(default=self.default)


def with_settings(schema: type, section: str, settings: Iterable[Setting]) -> type:
    """`schema` (the dataclass of the config section `section`) with the plug-in settings that live directly
    under that section added as fields, in the order given; its name, docstring and module stay the schema's."""
    fields = [setting.as_field() for setting in settings if setting.section == section]
    combined = dataclasses.make_dataclass(schema.__name__, fields, bases=(schema,))
    combined.__doc__, combined.__module__ = schema.__doc__, schema.__module__
    combined.__qualname__ = schema.__qualname__
    return combined
