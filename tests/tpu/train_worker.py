"""One process of the multi-process trainer tests (`test_distributed.py`, which also runs it
alone as the single-process reference): joins the others on 127.0.0.1 and trains the tiny
model on `parity_env` into a shared run directory; process 0 saves the final params next to
it. With STOP_AFTER, process 0 sends itself SIGTERM while logging that update (0-based): every
process stops after it, saved, and the worker exits 0.

Usage: python -m tests.tpu.train_worker PROCESS_ID PROCESSES PORT RUN_DIR [STALENESS STEPS
STOP_AFTER]
"""

from __future__ import annotations

import os
import signal
import sys

from tests.tpu import one_device_per_process

os.environ["XLA_FLAGS"] = one_device_per_process(os.environ.get("XLA_FLAGS", ""))

from tests.tpu import parity_env  # noqa: F401 (registers the environment, in pool workers too)


def main(process_id: int, processes: int, port: int, run_dir: str, staleness: int = 0,
         steps: int = 2, stop_after: int = -1) -> None:
    import jax
    import numpy as np

    from tpu import distributed

    distributed.initialize(distributed.DistributedConfig(f"127.0.0.1:{port}", processes,
                                                         process_id))
    from jax.experimental import multihost_utils

    from prover_jax.interrupt import Interrupted
    from prover_jax.trainer import initial_model, train
    from tests.tpu.test_distributed import TRAIN

    config = TRAIN(run_dir, staleness, steps)

    def log(line: str) -> None:
        if line.startswith(f"step {stop_after + 1}/"):
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        rows = train(config, *initial_model(config), log=log)
    except Interrupted:
        jax.distributed.shutdown()
        return
    assert rows and rows[-1]["step"] == steps - 1, rows
    from prover_jax.learner import Checkpoints, Learner
    from tpu.mesh import build_mesh

    cfg, _, _ = initial_model(config)
    learner = Learner(cfg, config.learner, build_mesh(config.mesh))
    state = Checkpoints(f"{run_dir}/checkpoints").restore(learner.abstract_state())
    params = multihost_utils.process_allgather(state.params, tiled=True)
    if distributed.is_main():
        np.savez(f"{run_dir}/final.npz", *jax.tree.leaves(params))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]), sys.argv[4], *map(int, sys.argv[5:8]))
