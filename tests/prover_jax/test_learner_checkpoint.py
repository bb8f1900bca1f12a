"""Checkpoints: bit-identical resume, keep-last-N, corrupt and killed saves fall back.

Run as a script (`python test_learner_checkpoint.py DIR`) this file is the child process of the
kill test: it saves checkpoints of a known sequence of states until it is killed.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import time
import warnings
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax
import numpy as np
import pytest

from prover_jax.learner import Checkpoints, Learner, TrainState
from prover_jax.learner.checkpoint import CHECKSUMS, QUARANTINE, without_missing_metadata
from tests.prover_jax.test_learner_step import CFG, FP32, init_params, make_batch


def numbered_state(base: TrainState, step: int) -> TrainState:
    """A state that encodes `step`: params + step, data position 10 x step."""
    return dataclasses.replace(
        base, params=jax.tree.map(lambda p: p + step, base.params),
        step=jax.numpy.int32(step), data_position=jax.numpy.int32(10 * step))


def child(directory: str) -> None:
    learner = Learner(CFG, FP32)
    base = learner.init(init_params(), rng=5)
    checkpoints = Checkpoints(directory, keep=3)
    step = 0
    while True:
        step += 1
        checkpoints.save(numbered_state(base, step))
        print(step, flush=True)


@pytest.fixture(scope="module")
def learner():
    return Learner(CFG, FP32)


def train(learner: Learner, state: TrainState, batches, steps: int) -> TrainState:
    """`steps` updates, each on the batch at the state's data position."""
    for _ in range(steps):
        state, _ = learner.train_step(state, batches[int(state.data_position)])
        state = dataclasses.replace(state, data_position=state.data_position + 1)
    return state


def leaves(state: TrainState) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(state)]


def test_resume_is_bit_identical(learner, tmp_path, caplog):
    batches = [make_batch(seed) for seed in range(4)]
    straight = train(learner, learner.init(init_params(), rng=9), batches, 4)

    checkpoints = Checkpoints(tmp_path, keep=2)
    checkpoints.save(train(learner, learner.init(init_params(), rng=9), batches, 2))
    with caplog.at_level(logging.WARNING):
        restored = Checkpoints(tmp_path).restore(learner.abstract_state())
    assert "Metadata file does not exist" not in caplog.text  # orbax's notice, dropped
    assert without_missing_metadata(logging.LogRecord("absl", logging.WARNING, "", 0,
                                                      "Disk full", (), None))
    assert int(restored.step) == 2 and int(restored.data_position) == 2
    assert restored.params["embed"].sharding == learner.state_shardings.params["embed"]
    resumed = train(learner, restored, batches, 2)
    for a, b in zip(leaves(resumed), leaves(straight), strict=True):
        np.testing.assert_array_equal(a, b)


def test_keep_last_n_and_steps_must_advance(learner, tmp_path):
    base = learner.init(init_params())
    checkpoints = Checkpoints(tmp_path, keep=2)
    for step in range(1, 5):
        checkpoints.save(numbered_state(base, step))
    assert checkpoints.steps() == [3, 4]
    with pytest.raises(ValueError, match="must advance"):
        checkpoints.save(numbered_state(base, 4))
    with pytest.raises(ValueError, match="keep"):
        Checkpoints(tmp_path, keep=0)
    assert Checkpoints(tmp_path / "empty").restore(learner.abstract_state()) is None


def largest_file(folder: Path) -> Path:
    files = [p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS]
    return max(files, key=lambda p: p.stat().st_size)


def test_corrupt_checkpoints_fall_back_with_a_warning(learner, tmp_path):
    base = learner.init(init_params())
    checkpoints = Checkpoints(tmp_path, keep=4)
    for step in range(1, 5):
        checkpoints.save(numbered_state(base, step))
    largest_file(tmp_path / "4").write_bytes(b"garbage")
    data = largest_file(tmp_path / "3")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # truncated
    (tmp_path / "2" / CHECKSUMS).unlink()  # a save that never finished
    with pytest.warns(RuntimeWarning) as caught:
        state = checkpoints.restore(learner.abstract_state())
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3
    assert "step 4" in messages[0] and "changed" in messages[0]
    assert "step 3" in messages[1] and "step 2" in messages[2] and CHECKSUMS in messages[2]
    assert int(state.step) == 1 and int(state.data_position) == 10
    np.testing.assert_array_equal(np.asarray(state.params["embed"]),
                                  np.asarray(base.params["embed"]) + 1)
    assert sorted(p.name for p in (tmp_path / QUARANTINE).iterdir()) == ["2", "3", "4"]
    checkpoints.save(numbered_state(base, 2))  # training goes on from step 1
    assert checkpoints.steps() == [1, 2]


def test_killed_during_save_leaves_the_last_good_checkpoint(learner, tmp_path):
    log = tmp_path.parent / "child.log"
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, __file__, str(tmp_path)],
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        saved = [process.stdout.readline().strip() for _ in range(3)]
        assert all(saved), f"the saving process failed:\n{log.read_text()[-3000:]}"
        time.sleep(np.random.default_rng().uniform(0.0, 0.2))  # most likely mid-save
    finally:
        process.kill()
        process.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an unsealed last save is expected
        state = Checkpoints(tmp_path, keep=3).restore(learner.abstract_state())
    step = int(state.step)
    assert step >= int(saved[-1])
    assert int(state.data_position) == 10 * step
    base = learner.init(init_params(), rng=5)
    np.testing.assert_array_equal(np.asarray(state.rng), np.asarray(base.rng))
    np.testing.assert_allclose(np.asarray(state.params["embed"]),
                               np.asarray(base.params["embed"]) + step, rtol=0, atol=1e-6)
    assert not [p for p in tmp_path.iterdir() if "tmp" in p.name]  # leftovers cleaned up


if __name__ == "__main__":
    child(sys.argv[1])


def test_a_checkpoint_of_another_model_is_an_error_that_moves_nothing(learner, tmp_path):
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save(numbered_state(learner.init(init_params()), 1))
    wider = dataclasses.replace(CFG, vocab_size=CFG.vocab_size + 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: nothing is quarantined
        with pytest.raises(ValueError, match=r"another model.*opt_state/1/0/mu/embed has shape "
                                             rf"\({CFG.vocab_size}, "):
            checkpoints.restore(Learner(wider, FP32).abstract_state())
    assert checkpoints.steps() == [1] and not (tmp_path / QUARANTINE).exists()
    assert int(checkpoints.restore(learner.abstract_state()).step) == 1
