"""prover_jax.ahead: batches produced in a thread, each with the params the staleness bound
names, in order, the in-flight ones handed over for a checkpoint, errors raised in the
learner's thread, and no thread left running after close."""

from __future__ import annotations

import threading
import time

import pytest

from prover_jax import ahead


def recorder(delay_s: float = 0.0, fail_at: int | None = None):
    made = []

    def produce(step, params, version):
        time.sleep(delay_s)
        if step == fail_at:
            raise RuntimeError(f"rollout {step} failed")
        made.append((step, params, version))
        return (step, version)

    return produce, made


@pytest.mark.parametrize("staleness", [1, 2])
def test_each_batch_is_sampled_with_the_params_the_bound_names(staleness):
    produce, made = recorder()
    source = ahead.Ahead(produce, staleness, first=0, steps=6, pending={})
    source.offer(0, "params 0")
    for step in range(6):
        assert source.take(step) == (step, max(0, step - staleness))
        source.offer(step + 1, f"params {step + 1}")
    source.close()
    assert [(s, p) for s, p, _ in made] == [(s, f"params {max(0, s - staleness)}")
                                            for s in range(6)]


def test_a_resumed_run_goes_on_after_its_pending_batches():
    produce, made = recorder()
    source = ahead.Ahead(produce, 1, first=3, steps=6, pending={3: (3, 2)})
    source.offer(3, "params 3")
    assert source.take(3) == (3, 2)  # the saved batch, not produced again
    assert source.pending(4) == {4: (4, 3)}  # produced with the restored params
    source.close()
    assert made[0] == (4, "params 3", 3)


def test_an_error_in_the_thread_is_raised_in_the_learners():
    produce, _ = recorder(fail_at=1)
    source = ahead.Ahead(produce, 1, first=0, steps=4, pending={})
    source.offer(0, "params 0")
    assert source.take(0) == (0, 0)
    with pytest.raises(RuntimeError, match="rollout 1 failed"):
        source.take(1)
    source.close()


def test_close_waits_for_the_batch_in_production():
    started = []
    produce, made = recorder(delay_s=0.3)

    def noted(step, params, version):
        started.append(step)
        return produce(step, params, version)

    source = ahead.Ahead(noted, 1, first=0, steps=4, pending={})
    source.offer(0, "params 0")
    assert source.take(0) == (0, 0)
    while len(started) < 2:  # batch 1 (params 0 too) is being produced
        time.sleep(0.01)
    source.close()
    assert not any(t.name == "rollouts ahead" for t in threading.enumerate())
    assert [step for step, _, _ in made] == [0, 1]  # it finished batch 1, started no other


def test_pending_batches_are_saved_beside_the_kept_checkpoints_by_each_process(tmp_path):
    ahead.save_pending(tmp_path, 3, {3: "a"}, keep={3})
    ahead.save_pending(tmp_path, 3, {3: "a of 1"}, keep={3}, process=1)
    ahead.save_pending(tmp_path, 6, {6: "b"}, keep={3, 6})
    ahead.save_pending(tmp_path, 9, {}, keep={6, 9})  # a run's last: nothing in flight
    assert sorted(p.name for p in (tmp_path / ahead.PENDING).iterdir()) == [
        "3.1.pkl", "6.0.pkl", "9.0.pkl"]  # process 1 has not saved since
    assert ahead.load_pending(tmp_path, 6) == {6: "b"} and ahead.load_pending(tmp_path, 9) == {}
    assert ahead.load_pending(tmp_path, 3, process=1) == {3: "a of 1"}
    with pytest.raises(ValueError, match="no in-flight batches of process 0"):
        ahead.load_pending(tmp_path, 3)
    ahead.save_pending(tmp_path, 6, {6: "b of 1"}, keep={6, 9}, process=1)
    assert not (tmp_path / ahead.PENDING / "3.1.pkl").exists()
