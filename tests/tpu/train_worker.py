"""One process of the multi-process trainer test (`test_distributed.py`, which also runs it
alone as the single-process reference): joins the others on 127.0.0.1 and trains the tiny
model on `parity_env` for 2 steps into a shared run directory; process 0 saves the final params
next to it.

Usage: python -m tests.tpu.train_worker PROCESS_ID PROCESSES PORT RUN_DIR
"""

from __future__ import annotations

import os
import sys

from tests.tpu import one_device_per_process

os.environ["XLA_FLAGS"] = one_device_per_process(os.environ.get("XLA_FLAGS", ""))

from tests.tpu import parity_env  # noqa: F401 (registers the environment, in pool workers too)


def main(process_id: int, processes: int, port: int, run_dir: str) -> None:
    import jax
    import numpy as np

    from tpu import distributed

    distributed.initialize(distributed.DistributedConfig(f"127.0.0.1:{port}", processes,
                                                         process_id))
    from jax.experimental import multihost_utils

    from prover_jax.trainer import initial_model, train
    from tests.tpu.test_distributed import TRAIN

    config = TRAIN(run_dir)
    rows = train(config, *initial_model(config), log=lambda line: None)
    assert [row["step"] for row in rows] == [0, 1], rows
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
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
