"""Restorable agent environments with instrumented terminal verifiers.

``envs.make(name)`` builds an environment; every environment follows :class:`envs.base.Env`
(text actions, exact snapshots) and exposes its terminal verifier as atoms
(:class:`envs.verifier.Verifier`). ``envs.pool.EnvPool`` runs many of them in worker processes.
"""

from envs.base import (
    Env,
    Replay,
    Step,
    Task,
    check_name,
    make,
    names,
    register,
    replay_suffix,
    source_line,
    task_seed,
)
from envs.verifier import Atom, Kind, Mutation, Role, Status, Verifier

__all__ = [
    "Atom", "Env", "Kind", "Mutation", "Replay", "Role", "Status", "Step", "Task", "Verifier",
    "check_name", "make", "names", "register", "replay_suffix", "source_line", "task_seed",
]
