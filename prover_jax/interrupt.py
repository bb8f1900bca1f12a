"""Stopping a run between steps on SIGTERM or SIGINT.

A preempted TPU VM and a cluster scheduler stop a job with SIGTERM; a person stops it with
Ctrl-C (SIGINT). Within `deferred_signals` the first of either is only recorded: the training
loop finishes the step it is in, saves a checkpoint and raises `Interrupted`, and the command
line exits with ``128 + signal`` and one line saying how to resume. A second signal acts at once
as it normally would (SIGINT raises KeyboardInterrupt, SIGTERM ends the process), for a step
that takes too long to wait for. Environment workers ignore both: the trainer stops them.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A run stopped by ``signum`` after completing and saving `step` steps (the progress
    line's ``step STEP/N``)."""

    def __init__(self, signum: int, step: int, run_dir: str | None):
        self.signum = signum
        kept = (f"saved; resume it with the same command (--run-dir {run_dir})" if run_dir else
                "it had no --run-dir, so nothing was kept")
        super().__init__(f"stopped by {signal.Signals(signum).name} after step {step}: "
                         f"{kept}")

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by the signal."""
        return 128 + self.signum


@contextlib.contextmanager
def deferred_signals() -> Iterator[Callable[[], int | None]]:
    """Defers the first SIGINT or SIGTERM while open; yields a function that returns that
    signal's number, or None before one. Off the main thread (where Python cannot handle
    signals) nothing is deferred and the function always returns None."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    received: list[int] = []
    previous = {s: signal.getsignal(s) for s in SIGNALS}

    def record(signum, frame):
        received.append(signum)
        for s in SIGNALS:  # the next one acts at once
            signal.signal(s, previous[s])

    for s in SIGNALS:
        signal.signal(s, record)
    try:
        yield lambda: received[0] if received else None
    finally:
        for s in SIGNALS:
            signal.signal(s, previous[s])


@contextlib.contextmanager
def exit_when_interrupted() -> Iterator[None]:
    """Turns `Interrupted` into its one-line message and exit code."""
    try:
        yield
    except Interrupted as e:
        print(e, file=sys.stderr)
        sys.exit(e.exit_code)
