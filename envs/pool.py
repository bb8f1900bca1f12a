"""A pool of worker processes, each running many environment instances ("slots").

``EnvPool(env, num_slots, num_workers)`` spreads slots over workers round-robin. Every call
takes a list of slots and sends one message per worker, so a batch of N actions costs one round
trip per worker, and workers run in parallel. After every reset, step and restore the worker
returns each slot's snapshot with its result; the pool keeps the latest one, so
:meth:`EnvPool.snapshot` needs no round trip.

A worker announces itself once it has imported everything and built its slots' environments;
until then it is *starting*, and only ``start_timeout`` applies. A started worker that stops
answering a request within ``timeout`` seconds is *hung*; one whose process exits is *dead*.
Either way the pool starts a replacement and sends it the lost slots' latest snapshots together
with the interrupted request, so no step is lost or applied twice (a snapshot is taken only
after a completed request, and restoring it replays identically). A replacement that itself
dies, hangs or is slow to start is one more restart of the same request; after
``max_restarts`` of them the request is a bug, not bad luck, and the pool raises, listing every
loss. A worker whose environments cannot be built, or whose process raised while re-importing
the main script (a script that creates a pool without a main guard), is not restarted: a
``WorkerStartError`` carries the worker's own traceback, and is raised again on every later
call to that worker. (The traceback of a main script that fails before it imports this module
cannot be recovered; such a worker counts as died while starting.)

One slot's environment error is that slot's alone: the other slots of the call complete and
keep their snapshots, every worker's reply is read, and then the first error is raised.

Workers start with the ``spawn`` method by default (safe when the parent runs JAX threads) and
exit when the parent closes the pool or dies (their pipe closes), so no process is orphaned.
They start with ``JAX_PLATFORMS=cpu``: environments need no accelerator, and a worker that
imported JAX on a TPU VM would otherwise try to open the TPU the trainer holds.
Under ``spawn`` every worker imports the main module again: a script that creates a pool must do
so under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sys
import tempfile
import traceback
import uuid
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from envs.base import Env, Step, Task, make

QUERIES = ("admissible", "expert_action", "instruction")
_WORKER_NAME = "EnvPool-worker-"
_WORKER_ENVIRONMENT = {"JAX_PLATFORMS": "cpu"}


def _start_error_path(process_name: str) -> str:
    """Where a worker that fails while importing the main module leaves its traceback."""
    return os.path.join(tempfile.gettempdir(), f"{process_name}.err")


def _bootstrapping() -> bool:
    """True in a spawned worker that is still importing the parent's main module."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def _record_start_errors() -> None:
    """In a starting worker, keeps the traceback of an uncaught error for the parent to read.

    Such an error happens before the worker has its pipe (the main module is imported first),
    so it goes to a file named after the worker process.
    """
    name = multiprocessing.current_process().name
    if not (_bootstrapping() and name.startswith(_WORKER_NAME)):
        return
    previous = sys.excepthook

    def record(kind, value, tb):
        with contextlib.suppress(OSError), open(_start_error_path(name), "w") as out:
            out.write("".join(traceback.format_exception(kind, value, tb)))
        previous(kind, value, tb)

    sys.excepthook = record


_record_start_errors()


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """``os.environ`` with `values` set (what a process started now inherits), then restored."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


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


def _serve(connection, factory: _Factory, slots: tuple[int, ...]) -> None:
    """A worker's loop: one request in, one reply out, until told to stop or orphaned.

    The environments of all the worker's slots are built before it says it is ready, so a
    request's timeout never covers the imports and indexes that building them takes.
    """
    for signum in (signal.SIGINT, signal.SIGTERM):  # a terminal's Ctrl-C reaches the whole
        signal.signal(signum, signal.SIG_IGN)         # group; the parent stops the workers
    try:
        envs = {slot: factory() for slot in slots}
    except Exception:
        connection.send(("error", traceback.format_exc()))
        return
    connection.send(("ready", None))
    while True:
        try:
            op, items, restores = connection.recv()
        except (EOFError, OSError):
            return
        if op == "close":
            return
        try:
            for slot, state in restores:
                envs[slot].restore(state)
        except Exception:
            connection.send(("error", traceback.format_exc()))
            continue
        connection.send(("ok", [_outcome(envs[slot], op, arg) for slot, arg in items]))


def _outcome(env: Env, op: str, arg: Any) -> tuple[str, Any, Any]:
    """("ok", result, snapshot) of one slot's request, or ("error", traceback, None): one slot's
    error neither stops the others nor loses their snapshots."""
    try:
        return ("ok", *_apply(env, op, arg))
    except Exception:
        return "error", traceback.format_exc(), None


def _apply(env: Env, op: str, arg: Any):
    if op == "reset":
        return env.reset(arg), env.snapshot()
    if op == "step":
        return env.step(arg), env.snapshot()
    if op == "restore":
        env.restore(arg)
        return None, arg
    if op == "random_action":
        return env.random_action(random.Random(arg)), None
    if op == "sampled_expert_action":
        return env.sampled_expert_action(random.Random(arg)), None
    if op in QUERIES:
        return getattr(env, op)(), None
    raise ValueError(f"unknown pool operation {op!r}")


@dataclasses.dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    connection: multiprocessing.connection.Connection
    started: bool = False  # it said "ready"
    replaced: bool = False  # it replaces a lost worker and has not completed a request yet
    start_error: WorkerStartError | None = None  # it cannot start: raised on every use


class WorkerError(RuntimeError):
    """An environment raised inside a worker; the message carries the worker's traceback."""


class WorkerStartError(RuntimeError):
    """A worker process failed before it could serve; the message carries its traceback."""


class _Lost(Exception):
    """A worker died or hung; the message says which and how."""


class EnvPool:
    """Environments in worker processes, addressed by slot ``0 .. num_slots - 1``.

    Args:
        env: a registered environment name (built with ``envs.make(env, **config)``), or a
            picklable zero-argument callable that returns an :class:`envs.base.Env`.
        num_slots: how many environment instances (episodes in flight) the pool holds.
        num_workers: worker processes; slot ``s`` lives in worker ``s % num_workers``.
        timeout: seconds a started worker may take for one request before it is declared hung
            (None: no limit).
        start_timeout: seconds a new worker may take to import and build its environments.
        max_restarts: replacements of one worker for the same request after which the pool
            gives up.
        start_method: a ``multiprocessing`` start method.
    """

    def __init__(self, env: str | Callable[[], Env], num_slots: int, num_workers: int = 2, *,
                 config: dict[str, Any] | None = None, timeout: float | None = 60.0,
                 start_timeout: float | None = 600.0, max_restarts: int = 3,
                 start_method: str = "spawn"):
        if _bootstrapping():
            raise RuntimeError(
                "EnvPool was created while a worker process imported the main module. Under the "
                "'spawn' start method every worker re-imports the script that started it; create "
                "the pool under `if __name__ == \"__main__\":`.")
        if num_slots < 1 or num_workers < 1:
            raise ValueError(f"need num_slots >= 1 and num_workers >= 1, got {num_slots}, "
                             f"{num_workers}")
        if any(t is not None and t <= 0 for t in (timeout, start_timeout)) or max_restarts < 0:
            raise ValueError(f"need timeouts > 0 (or None: no limit) and max_restarts >= 0, got "
                             f"{timeout}, {start_timeout}, {max_restarts}")
        if isinstance(env, str):
            self._factory = _Factory(env, tuple(sorted((config or {}).items())), None)
        else:
            if config:
                raise ValueError("config applies to a registered environment name only")
            self._factory = _Factory(None, (), env)
        self.num_slots = num_slots
        self.num_workers = min(num_workers, num_slots)
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.max_restarts = max_restarts
        self.restarts = 0
        self._context = multiprocessing.get_context(start_method)
        self._states: list[Hashable | None] = [None] * num_slots
        self._workers: list[_Worker] = []
        self._workers = [self._start(w) for w in range(self.num_workers)]

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

    def sampled_expert_actions(self, slots: Sequence[int], seeds: Sequence[int]) -> list[str]:
        """Each slot's ``sampled_expert_action``, drawn with ``random.Random(seeds[i])``."""
        return self._call("sampled_expert_action", slots, seeds)

    def pids(self) -> list[int]:
        """The worker process ids (they change when a worker is replaced)."""
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        """Stops every worker; waits briefly, then kills any that do not exit."""
        for worker in self._workers:
            with contextlib.suppress(OSError, ValueError):
                worker.connection.send(("close", [], []))
        for worker in self._workers:
            worker.process.join(timeout=5)
            self._stop(worker)
        self._workers = []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _slots_of(self, w: int) -> range:
        return range(w, self.num_slots, self.num_workers)

    def _start(self, w: int) -> _Worker:
        parent, child = self._context.Pipe()
        name = f"{_WORKER_NAME}{os.getpid()}-{uuid.uuid4().hex}"
        process = self._context.Process(target=_serve, name=name, daemon=True,
                                        args=(child, self._factory, tuple(self._slots_of(w))))
        with _environment(_WORKER_ENVIRONMENT):
            process.start()
        child.close()
        return _Worker(process, parent)

    @staticmethod
    def _stop(worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        worker.connection.close()
        with contextlib.suppress(OSError):
            os.remove(_start_error_path(worker.process.name))

    def _check_slots(self, slots: Sequence[int]) -> None:
        bad = [s for s in slots if not 0 <= s < self.num_slots]
        if bad:
            raise ValueError(f"slots {bad} out of range 0..{self.num_slots - 1}")
        if len(set(slots)) != len(slots):
            raise ValueError(f"slots repeat in one call: {list(slots)}")

    def _call(self, op: str, slots: Sequence[int], args: Sequence[Any]) -> list[Any]:
        """One request per worker, all in flight at once. Every reply is read, even after an
        error, so the pipes stay in step and every completed slot keeps its new snapshot; then
        the first error is raised."""
        self._check_slots(slots)
        if len(args) != len(slots):
            raise ValueError(f"{op}: {len(slots)} slots but {len(args)} arguments")
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, arg in zip(slots, args):
            by_worker.setdefault(slot % self.num_workers, []).append((slot, arg))
        errors: list[Exception] = []
        sent: dict[int, bool] = {}
        losses: dict[int, list[str]] = {}
        for w, items in by_worker.items():
            try:  # a request that cannot be pickled is not written at all
                if not self._workers[w].started:  # workers start in parallel; wait for each
                    try:
                        self._await_start(w)
                    except _Lost as lost:
                        losses[w] = [f"{lost}"]
                        self._replace(w)
                sent[w] = self._workers[w].started and self._send(w, op, items)
            except Exception as error:
                errors.append(error)
        results: dict[int, Any] = {}
        for w, sent_already in sent.items():
            try:
                reply = self._receive(w, op, by_worker[w], sent_already, losses.get(w, []))
            except Exception as error:
                errors.append(error)
                continue
            for (slot, _), (status, result, state) in zip(by_worker[w], reply):
                if status == "error":
                    errors.append(WorkerError(
                        f"environment error in worker {w}, slot {slot}:\n{result}"))
                    continue
                if op in ("reset", "step", "restore"):
                    self._states[slot] = state
                results[slot] = result
        if errors:
            raise errors[0]
        return [results[s] for s in slots]

    def _send(self, w: int, op: str, items: list[tuple[int, Any]]) -> bool:
        """Sends a request; a replacement worker first gets its slots' latest snapshots.

        Returns True: the request is written, or the worker is gone and `_reply` notices.
        """
        worker = self._workers[w]
        restores = ([(s, self._states[s]) for s in self._slots_of(w)
                     if self._states[s] is not None] if worker.replaced else [])
        with contextlib.suppress(OSError, ValueError):  # gone: _receive notices and recovers
            worker.connection.send((op, items, restores))
        return True

    def _receive(self, w: int, op: str, items: list[tuple[int, Any]], sent: bool,
                 losses: list[str]) -> list:
        """The reply to the request, sent now if it was not (the worker was still starting);
        a lost worker is replaced and the request replayed, up to ``max_restarts`` times in
        all (``losses``: those before the request was sent)."""
        losses = list(losses)
        while len(losses) <= self.max_restarts:
            try:
                if not sent:
                    self._await_start(w)
                    sent = self._send(w, op, items)
                reply = self._reply(w)
            except _Lost as lost:
                losses.append(f"{lost}")
                self._replace(w)
                sent = False
                continue
            self._workers[w].replaced = False
            return reply
        raise RuntimeError(
            f"worker {w} was lost {len(losses)} times on the same {op!r} request, more than "
            f"max_restarts={self.max_restarts}: " + "; ".join(losses))

    def _await_start(self, w: int) -> None:
        """Waits for worker ``w`` to say it is ready, so a large request never blocks on a worker
        that is still building its environments; a start error is raised again on later calls."""
        worker = self._workers[w]
        if worker.started:
            return
        if worker.start_error is None:
            try:
                status, payload = self._message(w, self.start_timeout, "starting")
            except WorkerStartError as error:
                worker.start_error = error
                raise
            if status == "ready":
                worker.started = True
                return
            worker.start_error = WorkerStartError(
                f"worker {w} could not build its environments:\n{payload}")
        raise worker.start_error

    def _reply(self, w: int) -> list:
        """The worker's answer to the request in flight; raises _Lost if it dies or hangs."""
        status, payload = self._message(w, self.timeout, "serving")
        if status == "error":
            raise WorkerError(f"environment error in worker {w}:\n{payload}")
        return payload

    def _message(self, w: int, timeout: float, phase: str) -> tuple[str, Any]:
        worker = self._workers[w]
        ready = multiprocessing.connection.wait(
            [worker.connection, worker.process.sentinel], timeout=timeout)
        if worker.connection in ready:
            with contextlib.suppress(EOFError, OSError):
                return worker.connection.recv()
        if not ready:
            raise _Lost(f"hung while {phase} (no answer within {timeout:g} s)")
        worker.process.join(timeout=5)  # its pipe is closed: it is exiting, or is killed now
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        if phase == "starting":
            with contextlib.suppress(OSError), open(_start_error_path(worker.process.name)) as f:
                raise WorkerStartError(
                    f"worker {w} failed while starting (exit code {worker.process.exitcode}); "
                    f"its traceback:\n{f.read()}")
        raise _Lost(f"died while {phase} (exit code {worker.process.exitcode})")

    def _replace(self, w: int) -> None:
        """Kills worker ``w`` if still alive and starts another in its place."""
        self._stop(self._workers[w])
        self.restarts += 1
        self._workers[w] = self._start(w)
        self._workers[w].replaced = True
