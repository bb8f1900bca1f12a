"""Multi-host: two CPU processes under jax.distributed (gloo on 127.0.0.1), each feeding its own
rows, train to the params of one process on the whole batch; and the start-up settings."""

from __future__ import annotations

import pickle
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.prover_jax.test_learner_step import CFG, FP32, init_params, make_batch, run
from tpu.distributed import DistributedConfig, from_environment

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(module: str, count: int, *args: str, timeout: float = 300) -> None:
    """Runs `count` processes of `module` (process id, count and a free port first) and waits;
    raises with their output if any fails."""
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-m", module, str(i), str(count), port, *args],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for i in range(count)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            proc.kill()
    failed = [i for i, proc in enumerate(procs) if proc.returncode != 0]
    assert not failed, "\n".join(f"process {i}:\n{outputs[i][-3000:]}" for i in failed)


def test_two_processes_train_like_one(tmp_path):
    from prover_jax.learner import Learner

    single = Learner(CFG, FP32)
    params = single.init(init_params()).params
    batches = [make_batch(seed, np.asarray(single.logprobs(params, make_batch(seed).batch.tokens)))
               for seed in range(2)]
    (tmp_path / "batches.pkl").write_bytes(pickle.dumps(jax.device_get(batches)))
    run_processes("tests.tpu.distributed_worker", 2, str(tmp_path / "batches.pkl"),
                  str(tmp_path / "out.npz"))
    expected, history = run(single, batches)
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got["loss"], history[-1]["loss"], rtol=1e-5, atol=2e-6)
    for path, x in jax.tree_util.tree_flatten_with_path(expected.params)[0]:
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        np.testing.assert_allclose(got[name], np.asarray(x), atol=1e-4, rtol=1e-5)


def test_settings_are_checked():
    assert not DistributedConfig().explicit
    assert from_environment({"PROVER_COORDINATOR": "10.0.0.2:1234", "PROVER_NUM_PROCESSES": "4",
                             "PROVER_PROCESS_ID": "3"}) == DistributedConfig("10.0.0.2:1234", 4, 3)
    with pytest.raises(ValueError, match="together"):
        DistributedConfig(coordinator="127.0.0.1:1")
    with pytest.raises(ValueError, match="host:port"):
        DistributedConfig("127.0.0.1", 2, 0)
    with pytest.raises(ValueError, match=r"process_id must be in \[0, num_processes\)"):
        DistributedConfig("127.0.0.1:1", 2, 2)
    with pytest.raises(ValueError, match="PROVER_PROCESS_ID='x' is not an integer"):
        from_environment({"PROVER_COORDINATOR": "h:1", "PROVER_NUM_PROCESSES": "2",
                          "PROVER_PROCESS_ID": "x"})
