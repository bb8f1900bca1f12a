"""One process of the 2-process learner test (`test_distributed.py`): joins the others on
127.0.0.1 (one CPU device each), takes its rows of the pickled batches, runs the train steps on
the global mesh, and process 0 writes the final params.

Usage: python -m tests.tpu.distributed_worker PROCESS_ID PROCESSES PORT BATCHES OUT
"""

from __future__ import annotations

import os
import pickle
import sys

from tests.tpu import one_device_per_process

os.environ["XLA_FLAGS"] = one_device_per_process(os.environ.get("XLA_FLAGS", ""))


def main(process_id: int, processes: int, port: int, batches_file: str, out: str) -> None:
    import jax
    import numpy as np

    from tpu import distributed
    from tpu.mesh import MeshConfig, build_mesh, from_process_local

    distributed.initialize(distributed.DistributedConfig(f"127.0.0.1:{port}", processes,
                                                         process_id))
    from jax.experimental import multihost_utils

    from prover_jax.learner import Learner
    from tests.prover_jax.test_learner_step import CFG, FP32, init_params

    with open(batches_file, "rb") as f:
        batches = pickle.load(f)
    mesh = build_mesh(MeshConfig(fsdp=-1))
    learner = Learner(CFG, FP32, mesh)
    state = learner.init(init_params())
    rows = batches[0].batch.tokens.shape[0] // processes
    mine = slice(process_id * rows, (process_id + 1) * rows)
    for full in batches:
        own = jax.tree.map(lambda x: x[mine], full)
        state, metrics = learner.train_step(state, from_process_local(mesh, own))
    params = multihost_utils.process_allgather(state.params, tiled=True)
    if distributed.is_main():
        flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(x)
                for path, x in jax.tree_util.tree_flatten_with_path(params)[0]}
        np.savez(out, loss=np.asarray(metrics["loss"]), **flat)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
