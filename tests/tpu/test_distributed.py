"""Multi-host: two CPU processes under jax.distributed (gloo on 127.0.0.1), each feeding its own
rows, train to the params of one process on the whole batch; and the start-up settings."""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from prover_jax.model_policy import SamplingConfig
from prover_jax.run_settings import AsyncConfig, TinyModel, TrainConfig
from prover_jax.settings import EvalConfig
from tests.prover_jax.test_learner_step import CFG, FP32, init_params, make_batch, run
from tests.tpu import parity_env
from tpu.distributed import DistributedConfig, from_environment
from tpu.mesh import MeshConfig

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


def TRAIN(run_dir: str, staleness: int = 0, steps: int = 2) -> TrainConfig:
    """The 2-process trainer tests' run: VICT on `parity_env` (mixed groups from a random
    model), 2 groups (one per process), `staleness` its `asynchronous.max_staleness`."""
    return TrainConfig(env=parity_env.NAME, credit="vict", steps=steps, groups=2, group_size=4,
                       asynchronous=AsyncConfig(max_staleness=staleness),
                       max_actions=1, workers=1, run_dir=run_dir, checkpoint_every=1,
                       sampling=SamplingConfig(max_new_tokens=4), eval_every=2,
                       evaluation=EvalConfig(tasks=2, samples=0), mesh=MeshConfig(fsdp=-1),
                       tiny=TinyModel(vocab_size=256, hidden_size=32, layers=1,
                                      intermediate_size=64, head_dim=8, tokenizer_episodes=5))


@pytest.mark.slow
def test_two_processes_run_the_trainer_like_one(tmp_path):
    """Each process rolls out its own group; process 0 alone writes the run's files; the
    checkpoint both wrote restores in one process to the params they trained, and those are
    the params one process trains on both groups."""
    from prover_jax.learner import Checkpoints, Learner
    from prover_jax.runs import load

    two, one = tmp_path / "two", tmp_path / "one"
    run_processes("tests.tpu.train_worker", 2, str(two), timeout=600)
    run_processes("tests.tpu.train_worker", 1, str(one), timeout=600)
    rows = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1]  # one line per step, not per process
    assert rows[0]["episode/count"] == 8 and "eval/greedy/success" in rows[1]
    assert all(0 < row["reward/mean"] < 1 for row in rows)  # mixed groups: updates
    assert "credit/vict/abstained" in rows[0]
    proofs = (two / "vict_proofs.jsonl").read_text().splitlines()
    assert {json.loads(line)["step"] for line in proofs} <= {0, 1}
    cfg, _, _ = load(two)
    learner = Learner(cfg, TRAIN(str(two)).learner)
    state = Checkpoints(two / "checkpoints").restore(learner.abstract_state())
    assert int(state.step) == 2
    final = np.load(two / "final.npz")
    for i, x in enumerate(jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(final[f"arr_{i}"], np.asarray(x))
    # the same episodes (the groups sample from their own streams), so the same update
    single = [json.loads(line) for line in (one / "metrics.jsonl").read_text().splitlines()]
    for name in ("reward/mean", "episode/actions", "episode/valid_actions", "learner/loss"):
        assert [row[name] for row in rows] == pytest.approx([row[name] for row in single],
                                                            rel=1e-5, abs=1e-6), name
    alone = np.load(one / "final.npz")
    for i in range(len(final.files)):
        np.testing.assert_allclose(final[f"arr_{i}"], alone[f"arr_{i}"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_processes_train_asynchronously_and_resume_like_one(tmp_path):
    """With one update of staleness, each process samples its group in a thread of its own
    and saves it while in flight; stopped after update 1 and resumed, two processes make the
    updates one process makes uninterrupted."""
    two, one = tmp_path / "two", tmp_path / "one"
    run_processes("tests.tpu.train_worker", 2, str(two), "1", "3", "1", timeout=600)
    assert sorted(p.name for p in (two / "pending").iterdir()) == ["1.0.pkl", "1.1.pkl",
                                                                   "2.0.pkl", "2.1.pkl"]
    run_processes("tests.tpu.train_worker", 2, str(two), "1", "3", timeout=600)
    run_processes("tests.tpu.train_worker", 1, str(one), "1", "3", timeout=600)
    rows = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    single = [json.loads(line) for line in (one / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [row["step"] for row in single] == [0, 1, 2]
    assert [row["async/staleness"] for row in rows] == [0, 1, 1]
    for name in ("reward/mean", "episode/actions", "learner/loss", "async/staleness"):
        assert [row[name] for row in rows] == pytest.approx([row[name] for row in single],
                                                            rel=1e-5, abs=1e-6), name
    np.testing.assert_allclose(np.load(two / "final.npz")["arr_0"],
                               np.load(one / "final.npz")["arr_0"], rtol=1e-5, atol=1e-6)


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


def test_the_entry_point_checks_its_settings(capsys):
    from tpu import train

    with pytest.raises(SystemExit):
        train.main(["--coordinator", "127.0.0.1:1", "--steps", "1"])
    assert "together" in capsys.readouterr().err
