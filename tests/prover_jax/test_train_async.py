"""The trainer with its rollouts produced ahead of the learner (bounded-staleness asynchronous
updates) and with the learner correcting for the sampler's mismatch; apart from
test_train.py so that the test workers share the long runs."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

import envs
from prover_jax.learner import Checkpoints, Learner
from prover_jax.model_policy import SamplingConfig
from prover_jax.plot import read_metrics
from prover_jax.run_settings import TrainConfig
from prover_jax.train import main
from prover_jax.trainer import environment_texts, step_line, tiny_model, tiny_tokenizer, train
from tests.prover_jax.test_train import KILL_ARGS, _interrupt_when, without_times


@pytest.mark.slow
def test_an_asynchronous_run_killed_and_resumed_is_bit_identical_to_an_uninterrupted_one(
        tmp_path):
    """With a staleness bound of 1, update t trains on a batch sampled with update t - 1's
    params (update 0's: the first two). A process sent SIGTERM stops after its step, saving
    the batch it produced for the next with its checkpoint; resumed, then SIGKILLed in the
    middle of step 4, its last checkpoint (after step 3) holding the batch it had produced
    for step 4, it resumes to the metrics and params of a run that never stopped."""
    args = [*KILL_ARGS, "--credit", "prover+vict", "--steps", "5", "--checkpoint-every", "3",
            "--set", "asynchronous.max_staleness=1"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    main([*args, "--run-dir", str(whole)])
    assert [row["async/staleness"] for row in read_metrics(whole)] == [0, 1, 1, 1, 1]

    def started() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "prover_jax.train", *args, "--run-dir",
                                 str(cut)], start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    process = started()
    output = _interrupt_when(process, cut / "metrics.jsonl", 1, signal.SIGTERM)
    assert process.returncode == 128 + signal.SIGTERM, output[-2000:]
    done = len(read_metrics(cut))
    assert [p.name for p in (cut / "pending").glob("*.pkl")] == [f"{done}.0.pkl"]
    process = started()
    output = _interrupt_when(process, cut / "metrics.jsonl", 4, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL, output[-2000:]
    assert f"{done} of 5 steps done" in output
    assert "3.0.pkl" in {p.name for p in (cut / "pending").glob("*.pkl")}
    main([*args, "--run-dir", str(cut)])
    assert without_times(read_metrics(cut)) == without_times(read_metrics(whole))
    tokenizer = tiny_tokenizer(environment_texts(envs.make("household")))
    cfg, _ = tiny_model(len(tokenizer))
    learner = Learner(cfg, TrainConfig().learner)
    states = [Checkpoints(run / "checkpoints").restore(learner.abstract_state())
              for run in (whole, cut)]
    for a, b in zip(jax.tree.leaves(states[0]), jax.tree.leaves(states[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    main([*args, "--steps", "6", "--run-dir", str(whole)])  # a finished run, extended:
    assert read_metrics(whole)[-1]["async/staleness"] == 0  # its next batch from its last params


def test_a_bf16_sampler_against_a_float32_learner_is_measured_and_corrected(tmp_path):
    """The sampler in bfloat16, the learner in float32: each step logs their mismatch on the
    sampled tokens and the truncated importance weights that correct for it."""
    tokenizer = tiny_tokenizer(environment_texts(envs.make("household"), episodes=3))
    cfg, params = tiny_model(len(tokenizer))
    learner = TrainConfig().learner
    config = TrainConfig(
        env="household", steps=1, groups=1, group_size=2, max_actions=2, workers=1,
        run_dir=str(tmp_path),
        sampling=SamplingConfig(max_new_tokens=4, min_prompt_tokens=512, dtype="bfloat16"),
        learner=dataclasses.replace(learner, loss=dataclasses.replace(
            learner.loss, is_correction="tis", is_cap=1.001)))
    row = train(config, cfg, params, tokenizer, log=lambda line: None)[0]
    assert row["learner/behaviour_gap"] > 1e-4  # bf16 rounding, not float32's 1e-7
    assert 0 < row["learner/is_truncated"] < 1
    assert row["learner/is_weight_max"] == pytest.approx(1.001)  # the cap, in float32
    assert row["learner/is_weight"] < row["learner/is_weight_max"]
    assert "IS truncated" in step_line(row, 1)
