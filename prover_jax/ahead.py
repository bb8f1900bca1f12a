"""Batches produced ahead of the learner: bounded-staleness asynchronous updates
(`prover_jax.run_settings.AsyncConfig`).

The batch of update t (its rollout and the credit method's host side: the trainer's `Sampled`)
is sampled with the params of update ``max(0, t - s)``, s the staleness bound. With s = 0 that
is update t's own params, and `Inline` produces each batch when the learner asks for it: the
synchronous loop. With s > 0, `Ahead` produces batches in a thread while the learner trains on
earlier ones, waiting for the params each batch needs, so none is older than the bound and a
run is the same whatever the timing. What a batch needs from other processes (the shapes they
agree on, credit calibrated over all of them) the learner's thread adds when it takes it, so
the thread never joins a collective and every process issues them in the same order. The
batches produced for updates a checkpoint has not yet made are saved with it, by every process
(`save_pending`), so a resumed run trains on exactly the batches the interrupted one would
have.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

PENDING = "pending"  # the run directory's folder of in-flight batches, one file per checkpoint

Produce = Callable[[int, Any, int], Any]  # (step, sampler params, their version) -> Produced


def version_of(step: int, staleness: int, floor: int = 0) -> int:
    """The params version (updates made) the batch of update `step` is sampled with: that of
    update ``step - staleness``, or `floor` where that is older (the run's start, or a
    finished run extended, whose batches in flight were never produced)."""
    return max(floor, step - staleness)


class Inline:
    """The synchronous loop: each batch produced when asked for, with the latest params."""

    def __init__(self, produce: Produce):
        self._produce = produce
        self._params: tuple[int, Any] | None = None

    def offer(self, version: int, params) -> None:
        """The sampler's params after `version` updates."""
        self._params = (version, params)

    def take(self, step: int):
        """The batch of update `step`."""
        version, params = self._params
        assert version == step, (version, step)
        self._params = None
        return self._produce(step, params, version)

    def close(self) -> None:
        pass


class Ahead:
    """Produces the batches of updates `first` .. `steps - 1` in a thread, update t's with the
    params of version `version_of(t, staleness, first)`; `pending` are batches already
    produced (a resumed run's, `load_pending`).

    The learner `offer`s the sampler's params after each update, then `take`s the next batch,
    waiting for it if the thread has not produced it yet. An exception in the thread is
    raised by the next `take` or `pending`.
    """

    def __init__(self, produce: Produce, staleness: int, first: int, steps: int,
                 pending: dict[int, Any]):
        self.staleness = staleness
        self._produce, self._steps = produce, steps
        self._params: dict[int, Any] = {}
        self._ready = dict(pending)
        self._error: BaseException | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._floor = first
        self._thread = threading.Thread(target=self._loop, args=(first + len(pending),),
                                        name="rollouts ahead", daemon=True)
        self._thread.start()

    def _loop(self, first: int) -> None:
        try:
            for step in range(first, self._steps):
                version = version_of(step, self.staleness, self._floor)
                with self._changed:
                    self._changed.wait_for(
                        lambda version=version: version in self._params or self._closed)
                    if self._closed:
                        return
                    params = self._params[version]
                produced = self._produce(step, params, version)
                with self._changed:
                    self._ready[step] = produced
                    for old in [v for v in self._params if v < version]:
                        del self._params[old]
                    self._changed.notify_all()
        except BaseException as error:  # raised again in the learner's thread
            with self._changed:
                self._error = error
                self._changed.notify_all()

    def offer(self, version: int, params) -> None:
        """The sampler's params after `version` updates (a copy the learner will not change)."""
        with self._changed:
            self._params[version] = params
            self._changed.notify_all()

    def _wait(self, steps: range) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._error is not None
                                   or all(s in self._ready for s in steps))
            if self._error is not None:
                raise self._error

    def take(self, step: int):
        """The batch of update `step`, once produced."""
        self._wait(range(step, step + 1))
        with self._changed:
            return self._ready.pop(step)

    def pending(self, step: int) -> dict[int, Any]:
        """The batches of updates `step` .. `step + staleness - 1` (within the run), once
        produced: what a checkpoint after `step` updates saves."""
        steps = range(step, min(step + self.staleness, self._steps))
        self._wait(steps)
        with self._changed:
            return {s: self._ready[s] for s in steps}

    def close(self) -> None:
        """Stops the thread after the batch it is producing, if any, and waits for it: a
        thread still inside JAX or the pool when the interpreter exits aborts the process."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()


def save_pending(directory: Path, step: int, batches: dict[int, Any], keep: set[int],
                 process: int = 0) -> None:
    """Writes `process`'s in-flight `batches` of the checkpoint after `step` updates
    (atomically; none after a run's last update), and removes its files of checkpoints not
    in `keep`. Every process saves its own: each samples its own groups."""
    folder = directory / PENDING
    folder.mkdir(exist_ok=True)
    partial = folder / f"{step}.{process}.partial"
    partial.write_bytes(pickle.dumps(batches))
    partial.replace(_pending_file(directory, step, process))
    for path in folder.glob(f"*.{process}.pkl"):
        if int(path.name.split(".")[0]) not in keep | {step}:
            path.unlink()


def load_pending(directory: Path, step: int, process: int = 0) -> dict[int, Any]:
    """`process`'s in-flight batches saved with the checkpoint after `step` updates (none
    where that was a run's last: extended, it samples its next batches with that update's
    params).

    Raises:
      ValueError: no file was saved with it.
    """
    path = _pending_file(directory, step, process)
    if not path.exists():
        raise ValueError(f"{directory} holds an asynchronous run whose checkpoint at step {step} "
                         f"has no in-flight batches of process {process} ({path}); it cannot "
                         "resume exactly")
    return pickle.loads(path.read_bytes())


def _pending_file(directory: Path, step: int, process: int) -> Path:
    return directory / PENDING / f"{step}.{process}.pkl"
