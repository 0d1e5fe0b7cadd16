"""What every plug-in is, whatever its kind (a data source, a pretraining optimizer, a training technique, a
downstream task), and the registry of a kind.

A plug-in is a class with:
- `name`: the short value users choose it by (`data.source=local`, `train.optim.name=lion`, `eval.tasks=[rte]`,
  `benchmark.variants=[z-loss]`);
- `settings`: the config keys it reads that are not every plug-in's of its kind, as `Setting`s at the paths users
  type them; a key several plug-ins read is one Setting they all list;
- `check(section)`: its rules on the config section its registry owns, called for every registered plug-in,
  chosen or not (a plug-in refuses its own keys set where it is not chosen: they would do nothing);
- `build(section, ...)`: a class method that makes it from that section, once checked.

A `Registry` holds a kind's plug-ins in order: it composes the section's schema from their settings, runs every
check and looks a plug-in up by name. So a new plug-in brings its keys and rules without a line in the schema's
file.
"""

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Iterable, Iterator, TypeVar

from cramming.errors import CrammingError, problems_of, raise_problems


@dataclass(frozen=True)
class Setting:
    """A config key a plug-in reads: its path as users type it (`train.layer_drop`, `impl.fp8`), its type and
    default. A dataclass type is a group of keys, its fields, with their defaults."""

    path: str
    type: Any
    default: Any = dataclasses.field(default=None, hash=False)  # a list default is copied for each config

    @property
    def section(self) -> str:
        """The config section it lives in (`train` for `train.layer_drop`)."""
        return self.path.rpartition(".")[0]

    @property
    def key(self) -> str:
        """Its name within the section (`layer_drop`)."""
        return self.path.rpartition(".")[2]

    def as_field(self) -> tuple[str, Any, dataclasses.Field]:
        """(name, type, field) for dataclasses.make_dataclass, under the section its path names."""
        if dataclasses.is_dataclass(self.type):
            return self.key, self.type, dataclasses.field(default_factory=self.type)
        if isinstance(self.default, list):
            return self.key, self.type, dataclasses.field(default_factory=lambda: list(self.default))
        return self.key, self.type, dataclasses.field(default=self.default)


class Plugin:
    """One choice of a kind; the module docstring says what each declares. Each kind's base class (Source,
    Optimizer, Technique, Task) documents what its section is and what else its plug-ins declare."""

    name: ClassVar[str]
    settings: ClassVar[tuple[Setting, ...]] = ()

    @classmethod
    def check(cls, section: Any) -> None:
        """Its rules on its registry's section: CrammingError (or Problems) naming what is out of its domain."""

    @classmethod
    def build(cls, section: Any, *context: Any) -> Any:
        """The plug-in made from its checked section (and what its kind hands every plug-in besides)."""
        raise NotImplementedError


P = TypeVar("P", bound=type[Plugin])


class Registry(Generic[P]):
    """A kind's plug-ins, in order (the order they are listed, checked and, for techniques, called in), chosen at
    the config key `key`."""

    def __init__(self, key: str, plugins: Iterable[P]):
        self.key, self.plugins = key, tuple(plugins)
        self.by_name = {plugin.name: plugin for plugin in self.plugins}
        if len(self.by_name) != len(self.plugins):
            raise ValueError(f"{key}: two plug-ins share a name: {[plugin.name for plugin in self.plugins]}")

    def __iter__(self) -> Iterator[P]:
        return iter(self.plugins)

    def __len__(self) -> int:
        return len(self.plugins)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.by_name)

    def named(self, name: str) -> P:
        """The plug-in users chose by `name`; an unknown one is an error listing the known ones."""
        if name not in self.by_name:
            raise CrammingError(f"{self.key}={name!r} is unknown; choose one of {', '.join(self.by_name)}")
        return self.by_name[name]

    def settings(self) -> list[Setting]:
        """Every plug-in's settings in order, a Setting several plug-ins list once; two different Settings at one
        path are a programming error."""
        by_path: dict[str, Setting] = {}
        for plugin in self.plugins:
            for setting in plugin.settings:
                if by_path.setdefault(setting.path, setting) != setting:
                    raise ValueError(f"{setting.path} is declared twice, differently: {by_path[setting.path]} and "
                                     f"{setting}")
        return list(by_path.values())

    def schema(self, shared: type, section: str, *others: "Registry") -> type:
        """The dataclass of config section `section`: `shared` (the keys every plug-in of the kind reads) with this
        registry's settings under `section` added as fields, then those of `others` that live there too."""
        settings = [setting for registry in (self, *others) for setting in registry.settings()]
        return with_settings(shared, section, settings)

    def check(self, section: Any) -> None:
        """Every plug-in's rules on `section`, chosen or not: every problem."""
        raise_problems(self.problems(section))

    def problems(self, section: Any) -> list[str]:
        return problems_of(*[functools.partial(plugin.check, section) for plugin in self.plugins])


def with_settings(schema: type, section: str, settings: Iterable[Setting]) -> type:
    """`schema` (the dataclass of the config section `section`) with the settings that live directly under that
    section added as fields, in the order given; its name, docstring and module stay the schema's."""
    fields = [setting.as_field() for setting in settings if setting.section == section]
    combined = dataclasses.make_dataclass(schema.__name__, fields, bases=(schema,))
    combined.__doc__, combined.__module__ = schema.__doc__, schema.__module__
    combined.__qualname__ = schema.__qualname__
    return combined
