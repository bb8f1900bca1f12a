"""A pool of worker processes, each running many environment instances ("slots").

``EnvPool(env, num_slots, num_workers)`` spreads slots over workers round-robin. Every call
takes a list of slots and sends one message per worker, so a batch of N actions costs one round
trip per worker, and workers run in parallel. After every reset, step and restore the worker
returns each slot's snapshot with its result; the pool keeps the latest one, so
:meth:`EnvPool.snapshot` needs no round trip.

Crash recovery: when a worker dies (killed, out of memory) or stops answering within
``timeout`` seconds, the pool starts a new one, restores its slots from their latest snapshots
and sends the interrupted request again. Because a snapshot is taken only after a completed
request, and restoring it replays identically, no step is lost or applied twice. A worker that
dies ``max_restarts`` times on the same request is a bug, not bad luck: the pool raises.

Workers start with the ``spawn`` method by default (safe when the parent runs JAX threads) and
exit when the parent closes the pool or dies (their pipe closes), so no process is orphaned.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import random
import traceback
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from envs.base import Env, Step, Task, make

QUERIES = ("admissible", "expert_action", "instruction")


@dataclasses.dataclass(frozen=True)
class _Factory:
    """Builds a slot's environment in a worker: ``make(name, **config)`` or ``build()``."""

    name: str | None
    config: tuple[tuple[str, Any], ...]
    build: Callable[[], Env] | None

    def __call__(self) -> Env:
        if self.build is not None:
            return self.build()
        return make(self.name, **dict(self.config))


def _serve(connection, factory: _Factory) -> None:
    """A worker's loop: one request in, one reply out, until told to stop or orphaned."""
    envs: dict[int, Env] = {}
    while True:
        try:
            op, items = connection.recv()
        except (EOFError, OSError):
            return
        if op == "close":
            return
        try:
            reply = [_apply(envs, factory, op, slot, arg) for slot, arg in items]
        except Exception:
            connection.send(("error", traceback.format_exc()))
            continue
        connection.send(("ok", reply))


def _apply(envs: dict[int, Env], factory: _Factory, op: str, slot: int, arg: Any):
    if slot not in envs:
        envs[slot] = factory()
    env = envs[slot]
    if op == "reset":
        return env.reset(arg), env.snapshot()
    if op == "step":
        return env.step(arg), env.snapshot()
    if op == "restore":
        env.restore(arg)
        return None, arg
    if op == "random_action":
        return env.random_action(random.Random(arg)), None
    if op in QUERIES:
        return getattr(env, op)(), None
    raise ValueError(f"unknown pool operation {op!r}")


@dataclasses.dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    connection: multiprocessing.connection.Connection


class WorkerError(RuntimeError):
    """An environment raised inside a worker; the message carries the worker's traceback."""


class EnvPool:
    """Environments in worker processes, addressed by slot ``0 .. num_slots - 1``.

    Args:
        env: a registered environment name (built with ``envs.make(env, **config)``), or a
            picklable zero-argument callable that returns an :class:`envs.base.Env`.
        num_slots: how many environment instances (episodes in flight) the pool holds.
        num_workers: worker processes; slot ``s`` lives in worker ``s % num_workers``.
        timeout: seconds a worker may take for one request before it is declared hung.
        max_restarts: crashes of the same request after which the pool gives up.
        start_method: a ``multiprocessing`` start method.
    """

    def __init__(self, env: str | Callable[[], Env], num_slots: int, num_workers: int = 2, *,
                 config: dict[str, Any] | None = None, timeout: float = 60.0,
                 max_restarts: int = 3, start_method: str = "spawn"):
        if num_slots < 1 or num_workers < 1:
            raise ValueError(f"need num_slots >= 1 and num_workers >= 1, got {num_slots}, "
                             f"{num_workers}")
        if isinstance(env, str):
            self._factory = _Factory(env, tuple(sorted((config or {}).items())), None)
        else:
            if config:
                raise ValueError("config applies to a registered environment name only")
            self._factory = _Factory(None, (), env)
        self.num_slots = num_slots
        self.num_workers = min(num_workers, num_slots)
        self.timeout = timeout
        self.max_restarts = max_restarts
        self.restarts = 0
        self._context = multiprocessing.get_context(start_method)
        self._states: list[Hashable | None] = [None] * num_slots
        self._workers = [self._start() for _ in range(self.num_workers)]

    def reset(self, slots: Sequence[int], tasks: Sequence[Task]) -> list[str]:
        """Starts an episode of ``tasks[i]`` in ``slots[i]``; returns the first observations."""
        return self._call("reset", slots, tasks)

    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[Step]:
        """Applies ``actions[i]`` in ``slots[i]``; returns the steps in the same order."""
        return self._call("step", slots, actions)

    def snapshot(self, slots: Sequence[int]) -> list[Hashable]:
        """The latest state of each slot (kept by the pool; no round trip)."""
        self._check_slots(slots)
        missing = [s for s in slots if self._states[s] is None]
        if missing:
            raise RuntimeError(f"slots {missing} have no episode; reset or restore them first")
        return [self._states[s] for s in slots]

    def restore(self, slots: Sequence[int], states: Sequence[Hashable]) -> None:
        """Puts ``slots[i]`` into ``states[i]`` (a snapshot from any slot of any worker)."""
        self._call("restore", slots, states)

    def query(self, op: str, slots: Sequence[int]) -> list[Any]:
        """Read-only calls: ``admissible``, ``expert_action`` or ``instruction`` per slot."""
        if op not in QUERIES:
            raise ValueError(f"unknown query {op!r}; expected one of {QUERIES}")
        return self._call(op, slots, [None] * len(slots))

    def random_actions(self, slots: Sequence[int], seeds: Sequence[int]) -> list[str]:
        """Each slot's ``random_action``, drawn with ``random.Random(seeds[i])``."""
        return self._call("random_action", slots, seeds)

    def pids(self) -> list[int]:
        """The worker process ids (they change when a worker is replaced)."""
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        """Stops every worker; waits briefly, then kills any that do not exit."""
        for worker in self._workers:
            try:
                worker.connection.send(("close", []))
            except (OSError, ValueError):
                pass
        for worker in self._workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.connection.close()
        self._workers = []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_serve, args=(child, self._factory), daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _check_slots(self, slots: Sequence[int]) -> None:
        bad = [s for s in slots if not 0 <= s < self.num_slots]
        if bad:
            raise ValueError(f"slots {bad} out of range 0..{self.num_slots - 1}")
        if len(set(slots)) != len(slots):
            raise ValueError(f"slots repeat in one call: {list(slots)}")

    def _call(self, op: str, slots: Sequence[int], args: Sequence[Any]) -> list[Any]:
        self._check_slots(slots)
        if len(args) != len(slots):
            raise ValueError(f"{op}: {len(slots)} slots but {len(args)} arguments")
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, arg in zip(slots, args):
            by_worker.setdefault(slot % self.num_workers, []).append((slot, arg))
        for w, items in by_worker.items():
            self._send(w, (op, items))
        results: dict[int, Any] = {}
        for w, items in by_worker.items():
            reply = self._receive(w, (op, items))
            for (slot, _), (result, state) in zip(items, reply):
                if op in ("reset", "step", "restore"):
                    self._states[slot] = state
                results[slot] = result
        return [results[s] for s in slots]

    def _send(self, w: int, request) -> None:
        try:
            self._workers[w].connection.send(request)
        except (OSError, ValueError):
            pass  # the worker is gone; _receive notices and recovers

    def _receive(self, w: int, request) -> list:
        for attempt in range(self.max_restarts + 1):
            worker = self._workers[w]
            ready = multiprocessing.connection.wait(
                [worker.connection, worker.process.sentinel], timeout=self.timeout)
            if worker.connection in ready:
                try:
                    status, payload = worker.connection.recv()
                except (EOFError, OSError):
                    status, payload = "crashed", None
                if status == "ok":
                    return payload
                if status == "error":
                    raise WorkerError(f"environment error in worker {w}:\n{payload}")
            self._replace(w)
            if attempt < self.max_restarts:
                self._send(w, request)
        raise RuntimeError(
            f"worker {w} died {self.max_restarts + 1} times on the same {request[0]!r} request")

    def _replace(self, w: int) -> None:
        """Kills worker ``w`` if still alive, starts another, restores its slots."""
        old = self._workers[w]
        if old.process.is_alive():
            old.process.kill()
        old.process.join()
        old.connection.close()
        self.restarts += 1
        self._workers[w] = self._start()
        mine = [(s, self._states[s]) for s in range(w, self.num_slots, self.num_workers)
                if self._states[s] is not None]
        if not mine:
            return
        connection = self._workers[w].connection
        self._send(w, ("restore", mine))
        try:
            status, payload = (connection.recv() if connection.poll(self.timeout)
                               else ("error", "no reply"))
        except (EOFError, OSError):
            status, payload = "error", "the new worker died"
        if status != "ok":
            raise WorkerError(f"restoring the slots of replaced worker {w} failed:\n{payload}")
