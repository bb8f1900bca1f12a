"""A household whose worker can be made to block, die or start slowly, driven by files.

The test and the worker process share a folder; the files in it say what the worker does, and
the worker leaves a file where the test must wait for it. Nothing depends on how fast either
process runs.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from envs.household import Household

BLOCKED = "blocked"  # created by a worker as it starts blocking in `block-once`
DIE_ON_RESTORE = "die-on-restore"  # holds n: the next n restores kill their worker
SLOW_START = "slow-start"  # holds seconds: building an environment takes that long


class ControlledHousehold(Household):
    """``block <action>`` never returns; ``block-once <action>`` blocks only the first time."""

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder

    def step(self, action: str):
        if action.startswith("block "):
            time.sleep(3600)
        if action.startswith("block-once "):
            marker = self.folder / BLOCKED
            if not marker.exists():
                marker.touch()
                time.sleep(3600)
            action = action.removeprefix("block-once ")
        return super().step(action)

    def restore(self, state) -> None:
        counter = self.folder / DIE_ON_RESTORE
        if counter.exists() and (left := int(counter.read_text())) > 0:
            counter.write_text(str(left - 1))
            os._exit(3)
        super().restore(state)


@dataclasses.dataclass(frozen=True)
class Controlled:
    """A picklable factory of :class:`ControlledHousehold` over ``folder``."""

    folder: Path

    def __call__(self) -> ControlledHousehold:
        slow = self.folder / SLOW_START
        if slow.exists():
            time.sleep(float(slow.read_text()))
        return ControlledHousehold(self.folder)


def wait_for(path: Path, seconds: float = 120.0) -> None:
    """Waits until ``path`` exists (a generous bound: only a broken worker reaches it)."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {seconds} s")
        time.sleep(0.01)


def broken_factory():
    """A factory whose environment cannot be built."""
    raise RuntimeError("this environment cannot be built")


def platforms_factory():
    """A factory that fails with the ``JAX_PLATFORMS`` its worker was started with."""
    raise RuntimeError(f"worker JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')}")
