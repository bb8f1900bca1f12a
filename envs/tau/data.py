"""The shipped benchmark data: base databases, policies and tasks, loaded once per process."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envs.tau.db import Base

DATA = Path(__file__).resolve().parent / "data"
TABLES = {"retail": ("orders", "products", "users"),
          "airline": ("flights", "reservations", "users")}
SPLITS = {"retail": ("train", "dev", "test"), "airline": ("test",)}


def arguments_key(arguments: Mapping[str, Any]) -> str:
    """Canonical JSON of tool arguments: equal iff the arguments are equal."""
    return json.dumps(arguments, sort_keys=True)


@dataclasses.dataclass(frozen=True)
class Action:
    """A ground-truth tool call; ``arguments`` is JSON text, in the task file's key order."""

    name: str
    arguments: str

    @property
    def kwargs(self) -> dict[str, Any]:
        """A fresh copy of the arguments."""
        return json.loads(self.arguments)

    @property
    def key(self) -> tuple[str, str]:
        """``(name, canonical arguments)``: equal iff the calls are equal."""
        return self.name, arguments_key(self.kwargs)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One benchmark task: the user's instruction, the ground-truth calls, required outputs."""

    user_id: str
    instruction: str
    actions: tuple[Action, ...]
    outputs: tuple[str, ...]


@functools.cache
def base(domain: str) -> Base:
    """The initial database of ``domain`` (shared; never mutate it)."""
    return Base({table: json.loads((DATA / domain / f"{table}.json").read_text())
                 for table in TABLES[domain]})


@functools.cache
def wiki(domain: str) -> str:
    """The domain policy shown to the agent."""
    return (DATA / domain / "wiki.md").read_text()


@functools.cache
def tasks(domain: str, split: str) -> tuple[TaskSpec, ...]:
    """The tasks of one split of ``domain``, in the benchmark's order."""
    if split not in SPLITS[domain]:
        raise ValueError(f"tau {domain}: unknown split {split!r}; expected one of "
                         f"{SPLITS[domain]}")
    raw = json.loads((DATA / domain / f"tasks_{split}.json").read_text())
    return tuple(
        TaskSpec(task["user_id"], task["instruction"],
                 tuple(Action(a["name"], json.dumps(a["kwargs"])) for a in task["actions"]),
                 tuple(task["outputs"]))
        for task in raw)
