"""Names resolved at first use, so that a command line can read and check its settings without
loading JAX: a package whose `__init__` imported its kernels, or a registry that imported the
functions it lists, would load it at once.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, sources: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for `package`: each name of `sources` is imported at its first
    use from the submodule ``sources[name]`` names (relative to `package`); a name equal to its
    submodule's is the submodule itself."""

    def attribute(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{sources[name]}")
        return module if sources[name] == name else getattr(module, name)

    return attribute


@dataclasses.dataclass(frozen=True)
class Deferred:
    """The function `name` of module `module`, imported at its first call."""

    module: str
    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)


_LOADED_GROUPS: set[str] = set()


def load_entry_points(group: str) -> None:
    """Calls every entry point of `group` once per process (marked first, so an entry point
    that asks its registry for names does not load the group again)."""
    if group in _LOADED_GROUPS:
        return
    _LOADED_GROUPS.add(group)
    for entry in importlib.metadata.entry_points(group=group):
        entry.load()()
