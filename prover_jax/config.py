"""Frozen config dataclasses from YAML files and dotted command-line overrides.

The dataclasses are the single source of defaults: a file or an override names only what it
changes, and the rest keeps the defaults of the dataclass tree (default factories included).
`load(TrainConfig, "run.yaml", ["learner.optimizer.learning_rate=1e-6"])` reads the file,
applies the overrides (each value parsed as YAML: `1e-6`, `true`, `null`, `[1, 2]`) and builds
the tree, checking every value against its field's type annotation. An unknown key or a value
of the wrong type is a ValueError naming the key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def to_dict(config: Any) -> dict:
    """A config dataclass as nested plain dicts (lists for tuples)."""
    def plain(value):
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(config)


SECRETS = frozenset({"api_key"})
REDACTED = "<redacted>"


def without_secrets(tree: Any) -> Any:
    """Nested dicts and lists with the value of every key in `SECRETS` that is set replaced by
    `REDACTED`: what a run directory or a log may hold."""
    if isinstance(tree, Mapping):
        return {k: REDACTED if k in SECRETS and v is not None else without_secrets(v)
                for k, v in tree.items()}
    if isinstance(tree, list):
        return [without_secrets(v) for v in tree]
    return tree


def flatten(tree: Mapping, prefix: str = "") -> dict:
    """Nested dicts as one dict of dotted keys: {"learner.optimizer.b1": 0.9, ...}."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def merge(base: dict, changes: Mapping) -> dict:
    """`base` with `changes` merged in, nested dicts key by key."""
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def override(data: dict, assignment: str) -> dict:
    """`data` with one `dotted.key=value` assignment applied (the value parsed as YAML).

    Raises:
      ValueError: an assignment without ``=`` or a key, or a value that is not YAML.
    """
    key, sep, text = assignment.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {assignment!r}: expected dotted.key=value")
    try:
        value: Any = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:
        raise ValueError(f"override {assignment!r}: the value is not YAML: {e}") from None
    for part in reversed(key.strip().split(".")):
        value = {part: value}
    return merge(data, value)


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """Raises a ValueError naming the option when `value` is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def build(cls: type[T], data: Mapping, where: str = "") -> T:
    """An instance of config dataclass `cls` from `data` (missing keys: `cls`'s defaults).

    Raises:
      ValueError: a key `cls` has no field for, or a value its annotation rejects, naming the
        dotted key; or what the dataclass itself rejects.
    """
    if not isinstance(data, Mapping):  # a bad setting, like any other: a ValueError
        where = where.rstrip(".") or "config"
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")  # noqa: TRY004
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"unknown key {where}{unknown[0]}; {cls.__name__} has "
                         f"{', '.join(sorted(fields))}")
    values = {name: _value(hints[name], data[name], f"{where}{name}") for name in data}
    return cls(**values)


def _value(hint: Any, value: Any, key: str) -> Any:
    """`value` checked (and converted: int to float, list to tuple) against `hint`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, f"{key}.")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _value(option, value, key)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[0] if len(errors) == 1 else
                         f"{key}: {value!r} is not a {_name(hint)}")
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"{key}: {value!r} is not one of {list(args)}")
        return value
    if hint is Any or origin in (Mapping, dict) or hint in (Mapping, dict):
        return value
    if origin in (tuple, Sequence, list):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{key}: expected a list, got {value!r}")
        item = args[0] if args else Any
        return tuple(_value(item, v, f"{key}[{i}]") for i, v in enumerate(value))
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads 1e-6 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint in (int, str, bool) and type(value) is hint:
        return value
    raise ValueError(f"{key}: expected {_name(hint)}, got {value!r}")


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint))


def load(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = (),
         defaults: T | None = None) -> T:
    """A `cls` config: `defaults` (default: `cls()`), then the YAML file at `path`, then each
    `dotted.key=value` override, checked as `build` does."""
    data = to_dict(defaults if defaults is not None else cls())
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text())
        if loaded is not None:
            if not isinstance(loaded, Mapping):
                raise ValueError(f"{path}: expected a mapping of settings at the top level")
            data = merge(data, loaded)
    for assignment in overrides:
        data = override(data, assignment)
    return build(cls, data)


def add_arguments(parser, shorthands: Mapping[str, type], example: str) -> None:
    """Adds ``--config FILE``, ``--set KEY=VALUE`` (repeatable; `example` shows one) and a
    ``--name`` flag for each of `shorthands` (setting name -> type) to an argparse parser."""
    parser.add_argument("--config", help="a YAML file of settings (e.g. configs/)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"a dotted setting, e.g. {example}")
    for name, kind in shorthands.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind,
                            help=f"shorthand for --set {name}=...")
    add_dry_run(parser)


def add_dry_run(parser) -> None:
    """Adds ``--dry-run``: check every setting, say what would run, run nothing."""
    parser.add_argument("--dry-run", action="store_true",
                        help="check the settings, print what would run, and exit")


def dry_run_lines(config: Any, reads: Sequence[str | Path | None] = ()) -> list[str]:
    """What ``--dry-run`` prints for a checked `config` (a config dataclass, or None): each
    setting that differs from its class's defaults (secrets redacted), then each path the run
    would read, marked where it does not exist yet (an earlier step or a download makes it)."""
    lines = ["dry run: the settings are valid; nothing ran"]
    if config is not None:
        defaults = flatten(to_dict(type(config)()))
        changed = {key: value for key, value in flatten(without_secrets(to_dict(config))).items()
                   if defaults.get(key) != value}
        lines += [f"  {key} = {value!r}" for key, value in changed.items()]
    for path in filter(None, reads):
        there = Path(path).expanduser().exists()
        lines.append(f"  reads {path}" + ("" if there else " (not there yet)"))
    return lines


def overrides(args, shorthands: Mapping[str, type]) -> list[str]:
    """The dotted overrides of parsed `add_arguments` flags: the shorthands given, then each
    ``--set``."""
    return [f"{name}={getattr(args, name)}" for name in shorthands
            if getattr(args, name) is not None] + args.set
