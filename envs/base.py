"""The environment protocol: text in, text out, exact snapshots.

An environment runs one episode at a time. ``reset(task)`` starts it and returns the first
observation; ``step(action)`` applies the agent's action text and returns a :class:`Step`.
``snapshot()`` returns the whole episode state as a plain, immutable, picklable value, and
``restore(state)`` puts any environment instance of the same kind back into it, so that every
later observation and reward repeats bit for bit. The state carries its task, so it can be
restored into a fresh instance in another process.

A malformed or impossible action never raises: it gets the benchmark's own feedback and
``info["valid"] = False``. Episodes end when the task is solved or failed (``done``, with the
terminal reward) or after ``max_turns`` actions (``done`` with reward 0 and
``info["truncated"] = True``).
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import hashlib
import importlib
import importlib.metadata
import inspect
import random
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, NamedTuple

SPLITS = ("train", "eval")


@dataclasses.dataclass(frozen=True, order=True)
class Task:
    """One task instance: the environment kind, the split and the index within it.

    Everything about the task (world layout, goal, catalogue) is generated from these three
    values by the environment, deterministically.
    """

    env: str
    split: str
    index: int


class Step(NamedTuple):
    """The result of one action: ``info`` has at least ``valid`` and ``truncated``."""

    obs: str
    done: bool
    reward: float
    info: dict[str, Any]


class Env(abc.ABC):
    """A restorable text environment. Subclasses implement the abstract methods."""

    name: ClassVar[str]
    max_turns: ClassVar[int]
    has_expert: ClassVar[bool] = True  # False: `expert_action` raises NotImplementedError
    splits: ClassVar[tuple[str, ...]] = SPLITS
    task_origin: ClassVar[str] = "generated"  # where the tasks come from (`task_source`)
    oracles: ClassVar[frozenset[str]] = frozenset()  # hidden-state oracles: "pivot", ...

    @abc.abstractmethod
    def split_size(self, split: str) -> int:
        """How many tasks ``split`` holds (``split`` is one of ``splits``)."""

    def num_tasks(self, split: str) -> int:
        """How many tasks ``split`` holds; indices ``0 .. num_tasks - 1`` are valid."""
        if split not in self.splits:
            raise ValueError(f"{self.name}: unknown split {split!r}; expected one of {self.splits}")
        return self.split_size(split)

    @abc.abstractmethod
    def reset(self, task: Task) -> str:
        """Starts an episode of ``task``; returns the first observation (task included)."""

    @abc.abstractmethod
    def step(self, action: str) -> Step:
        """Applies one action. Raises only when no episode is running."""

    @abc.abstractmethod
    def snapshot(self) -> Hashable:
        """The full episode state: an immutable, picklable value that includes the task."""

    @abc.abstractmethod
    def restore(self, state: Hashable) -> None:
        """Returns to a state from :meth:`snapshot` of any instance of this environment kind."""

    @abc.abstractmethod
    def verifier(self, task: Task | None = None) -> Any:
        """The instrumented terminal verifier (:class:`envs.verifier.Verifier`) of ``task``.

        Defaults to the running episode's task.
        """

    def admissible(self) -> list[str] | None:
        """The actions the benchmark lists as admissible now, or None where it lists none."""
        return None

    @abc.abstractmethod
    def instruction(self) -> str:
        """The system prompt that explains the task format and action syntax to the agent."""

    @abc.abstractmethod
    def expert_action(self) -> str:
        """The expert's next action from the current state (it may use hidden state)."""

    def sampled_expert_action(self, rng: random.Random) -> str:
        """The next action of an expert that makes random choices, drawn from ``rng``
        (household-pivot's demonstrator chooses among look-alikes); by default the expert's."""
        del rng
        return self.expert_action()

    def oracle_pivot(self, states: Sequence[Hashable]) -> tuple[int, int] | None:
        """The pivotal segment ``(first turn, last turn)`` of a successful episode with
        snapshots ``states``, read from hidden state (a positive control's judge), or None.
        Raises NotImplementedError unless ``"pivot"`` is in ``oracles``."""
        raise NotImplementedError(f"{self.name} has no pivot oracle (household-pivot has one)")

    def oracle_progress(self, state: Hashable) -> float:
        """The task's true progress in ``state``, in [0, 1], read from hidden state (a
        positive control's credit). Raises NotImplementedError unless ``"progress"`` is in
        ``oracles``."""
        raise NotImplementedError(
            f"{self.name} has no progress oracle (household-pivot has one)")

    def oracle_choice(self, state: Hashable) -> tuple[str, bool] | None:
        """Whether ``state`` is a pivotal choice, read from hidden state (a learning metric's
        probe, `prover_jax.choice_probe`): the action that makes it and whether that is the
        right choice, or None. Raises NotImplementedError unless ``"choice"`` is in
        ``oracles``."""
        raise NotImplementedError(f"{self.name} has no choice oracle (household-pivot has one)")

    def random_action(self, rng: random.Random) -> str:
        """A random plausible action now, for exploration, tests and benchmarks."""
        actions = self.admissible()
        if not actions:
            raise NotImplementedError(f"{self.name}: no admissible actions to sample from")
        return rng.choice(actions)

    def task_source(self) -> dict[str, Any]:
        """Where this instance's tasks come from and how many each split holds. A run logs it
        and records it in its directory, so that a change of source is never silent."""
        return {"env": self.name, "tasks": self.task_origin,
                "splits": {split: self.num_tasks(split) for split in self.splits}}

    def tasks(self, split: str) -> list[Task]:
        """Every task of ``split``, in index order."""
        return [Task(self.name, split, i) for i in range(self.num_tasks(split))]

    def check_action(self, action: Any) -> None:
        """Raises TypeError unless ``action`` is text; every ``step`` calls it first.

        Any text is an action (a malformed one is rejected by the environment, not raised), but
        a non-string is a bug in the caller.
        """
        if not isinstance(action, str):
            raise TypeError(f"{self.name}: an action is a str, got {type(action).__name__} "
                            f"{action!r:.80}")

    def check_task(self, task: Task) -> None:
        """Raises ValueError unless ``task`` belongs to this environment and exists."""
        if not isinstance(task, Task):
            raise TypeError(f"{self.name}: expected an envs.Task, got {type(task).__name__}")
        if task.env != self.name:
            raise ValueError(f"{self.name}: task {task} belongs to environment {task.env!r}")
        if not 0 <= task.index < self.num_tasks(task.split):
            raise ValueError(
                f"{self.name}: task index {task.index} out of range for split {task.split!r} "
                f"(0..{self.num_tasks(task.split) - 1})"
            )


class Replay(NamedTuple):
    """The snapshot of an environment that restores by replay (an engine without snapshots
    that is deterministic): its task and every action taken, in order. ``view`` is what the
    environment's verifier reads of the state reached (None without a verifier); restoring
    does not read it."""

    task: Task
    actions: tuple[str, ...]
    done: bool
    view: Hashable = None


def replay_suffix(played: tuple[str, ...], target: tuple[str, ...]) -> tuple[str, ...] | None:
    """The actions that take an engine which has played ``played`` since its reset to the state
    after ``target``; None when ``played`` is not a prefix of ``target`` (reset, then replay
    all of ``target``)."""
    if target[:len(played)] != played:
        return None
    return target[len(played):]


def source_line(source: dict[str, Any]) -> str:
    """One line of `Env.task_source`'s record: the environment, where its tasks come from and
    the tasks per split."""
    splits = ", ".join(f"{split} {count}" for split, count in source["splits"].items())
    details = "; ".join(f"{k}: {v}" for k, v in source.items()
                        if k not in ("env", "tasks", "splits"))
    return f"{source['env']}: {source['tasks']} ({splits}{'; ' + details if details else ''})"


def task_seed(task: Task) -> int:
    """A 64-bit seed for ``task``; different splits and indices get unrelated seeds."""
    key = f"{task.env}/{task.split}/{task.index}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


_REGISTRY: dict[str, Callable[..., Env]] = {}


def register(name: str, factory: Callable[..., Env]) -> None:
    """Makes ``make(name, **config)`` build an environment with ``factory(**config)``."""
    if name in _REGISTRY and _REGISTRY[name] is not factory:
        raise ValueError(f"environment {name!r} is already registered")
    _REGISTRY[name] = factory


PLUGINS = "prover_jax.envs"  # the entry-point group of other packages' environments


def plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The environments other installed packages declare under the `PLUGINS` entry-point
    group, by name; each entry point is the environment's factory (e.g. its `Env` class)."""
    return {point.name: point for point in importlib.metadata.entry_points(group=PLUGINS)}


def names(served: bool = True) -> list[str]:
    """The environment names: built-in, registered and declared by other packages
    (`plugins`), sorted; without the clients of servers the user runs (`SERVED`) when
    ``served`` is False."""
    known = set(_BUILTIN) | set(_REGISTRY) | set(plugins())
    return sorted(n for n in known if served or n not in SERVED)


def check_name(name: str) -> None:
    """Raises a ValueError, with the closest names, when ``name`` is no environment's (built-in
    or registered); imports nothing."""
    if name not in names():
        close = difflib.get_close_matches(name, names(), n=3)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise ValueError(f"unknown environment {name!r}; {hint}known: {', '.join(names())}")


def make(name: str, **config: Any) -> Env:
    """A new environment instance of kind ``name``, built with the options ``config`` (a
    ValueError names an unknown environment, or an option it does not take)."""
    check_name(name)
    if name in _BUILTIN and name not in _REGISTRY:
        importlib.import_module(_BUILTIN[name])  # registers it
    if name not in _REGISTRY:
        register(name, plugins()[name].load())
    factory = _REGISTRY[name]
    try:
        inspect.signature(factory).bind(**config)
    except TypeError as e:
        options = list(inspect.signature(factory).parameters)
        raise ValueError(f"{name}: {e} (its options: {options})") from None
    return factory(**config)


# Built-in environments, imported on first use (their imports are heavy: indexes, databases).
_BUILTIN: dict[str, str] = {
    "household": "envs.household",
    "household-small": "envs.household",
    "household-pivot": "envs.household",
    "alfworld": "envs.alfworld",
    "alfworld-small": "envs.alfworld",
    "webshop": "envs.webshop",
    "searchqa": "envs.searchqa",
    "tau-retail": "envs.tau",
    "tau-airline": "envs.tau",
    "agentgym-alfworld": "envs.agentgym",
    "agentgym-webshop": "envs.agentgym",
    "agentgym-searchqa": "envs.agentgym",
}
# clients of a server the user starts (they need its URL)
SERVED = frozenset({"agentgym-alfworld", "agentgym-webshop", "agentgym-searchqa"})
