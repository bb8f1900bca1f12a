"""Multi-host start-up: one process per host under `jax.distributed`.

On a TPU VM slice every worker runs the same command and JAX finds the others itself (the
slice's metadata); elsewhere (GPU hosts, or CPU processes in tests) give the coordinator's
address, the number of processes and this process's id, on the command line or in
``PROVER_COORDINATOR``, ``PROVER_NUM_PROCESSES`` and ``PROVER_PROCESS_ID``. On the CPU backend
collectives go through gloo.

After `initialize`, `jax.devices()` lists every process's devices, so a `tpu.mesh.build_mesh`
mesh spans them all; each process feeds its own rows (`tpu.mesh.from_process_local`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import jax

ENVIRONMENT = {"coordinator": "PROVER_COORDINATOR", "num_processes": "PROVER_NUM_PROCESSES",
               "process_id": "PROVER_PROCESS_ID"}


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Where the processes meet. All None: auto-detect on a TPU VM, else one process."""

    coordinator: str | None = None  # "host:port" of process 0
    num_processes: int | None = None
    process_id: int | None = None

    def __post_init__(self):
        given = [v is not None for v in dataclasses.astuple(self)]
        if any(given) and not all(given):
            raise ValueError("distributed: give coordinator, num_processes and process_id "
                             f"together (or none of them to auto-detect); got {self}")
        if all(given):
            host, _, port = self.coordinator.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"distributed: coordinator must be host:port, got "
                                 f"{self.coordinator!r}")
            if self.num_processes < 1 or not 0 <= self.process_id < self.num_processes:
                raise ValueError(f"distributed: process_id must be in [0, num_processes); got "
                                 f"{self.process_id} of {self.num_processes}")

    @property
    def explicit(self) -> bool:
        return self.coordinator is not None


def from_environment(environ=os.environ) -> DistributedConfig:
    """A DistributedConfig from ``PROVER_COORDINATOR`` etc. (unset: auto-detect)."""
    values = {field: environ.get(name) for field, name in ENVIRONMENT.items()}
    for field in ("num_processes", "process_id"):
        if values[field] is not None:
            try:
                values[field] = int(values[field])
            except ValueError:
                raise ValueError(f"{ENVIRONMENT[field]}={values[field]!r} is not an "
                                 f"integer") from None
    return DistributedConfig(**values)


def on_tpu_vm() -> bool:
    """Whether this host is a Cloud TPU VM worker (its accelerator devices or the slice's
    worker variables are there)."""
    return (Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists()
            or "TPU_WORKER_HOSTNAMES" in os.environ)


def initialize(config: DistributedConfig = DistributedConfig()) -> bool:
    """Joins the other processes; returns whether this run has several.

    Explicit settings always initialise (one process included, which tests the path); without
    them, a TPU VM auto-detects its slice and any other host runs alone. Call it before
    anything touches the devices.

    Raises:
      RuntimeError: from JAX, when its backend is already in use (initialise first) or the
        coordinator cannot be reached.
    """
    if config.explicit:
        # CPU devices need a collectives library across processes; accelerators ignore it
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=config.coordinator,
                                   num_processes=config.num_processes,
                                   process_id=config.process_id)
    elif on_tpu_vm():
        jax.distributed.initialize()
    return jax.process_count() > 1


def is_main() -> bool:
    """Whether this is process 0, the one that writes logs, plots and the run's files."""
    return jax.process_index() == 0


def gather_objects(obj) -> list:
    """Every process's JSON-serialisable `obj`, in process order (each process calls it at the
    same point). One process: ``[obj]``."""
    if jax.process_count() == 1:
        return [obj]
    import json

    import numpy as np
    from jax.experimental import multihost_utils

    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = multihost_utils.process_allgather(np.array([data.size], np.int64))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: data.size] = data
    gathered = multihost_utils.process_allgather(padded)
    return [json.loads(bytes(row[: int(size)]).decode())
            for row, size in zip(gathered, sizes.reshape(-1))]


def mean_over_processes(values: dict[str, float]) -> dict[str, float]:
    """Each key's mean over the processes that report it (each process's own numbers come
    from the same number of episodes)."""
    reports = gather_objects(values)
    keys = dict.fromkeys(k for report in reports for k in report)
    return {k: sum(r[k] for r in reports if k in r) / sum(k in r for r in reports)
            for k in keys}
