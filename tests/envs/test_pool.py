"""The worker pool: same results as in-process environments, crash recovery, clean shutdown."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import envs
from envs.pool import EnvPool, WorkerError, WorkerStartError
from tests.envs.controlled_env import (
    BLOCKED,
    DIE_ON_RESTORE,
    SLOW_START,
    Controlled,
    broken_factory,
    platforms_factory,
    wait_for,
)

TASKS = [envs.Task("household", "train", i) for i in range(6)]


def _reference(tasks, actions_per_turn):
    """The same episodes in this process."""
    local = [envs.make("household") for _ in tasks]
    for env, task in zip(local, tasks):
        env.reset(task)
    return local, [[env.step(a) for env, a in zip(local, actions)] for actions in actions_per_turn]


def _actions(envs_now, rng):
    return [rng.choice(env.admissible()) if not env.snapshot().done else None for env in envs_now]


def test_pool_matches_in_process_environments_and_restores_across_workers():
    rng = random.Random(0)
    local = [envs.make("household") for _ in TASKS]
    with EnvPool("household", len(TASKS), num_workers=2) as pool:
        assert pool.reset(range(6), TASKS) == [env.reset(t) for env, t in zip(local, TASKS)]
        for _ in range(10):
            live = [s for s in range(6) if not local[s].snapshot().done]
            actions = [rng.choice(local[s].admissible()) for s in live]
            assert pool.step(live, actions) == [local[s].step(a) for s, a in zip(live, actions)]
            assert pool.snapshot(live) == [local[s].snapshot() for s in live]
        assert pool.query("admissible", [0, 1]) == [local[0].admissible(), local[1].admissible()]
        # Slot 0 lives in worker 0, slot 1 in worker 1: move 0's episode into 1 and go on.
        state = pool.snapshot([0])[0]
        pool.restore([1], [state])
        local[1].restore(state)
        action = local[0].expert_action()
        assert pool.step([1], [action]) == [local[1].step(action)]


def _kill_when_blocked(folder, pool, worker):
    """Kills ``worker`` once it blocks inside a ``block-once`` step (in a thread)."""
    victim = pool.pids()[worker]

    def kill():
        wait_for(folder / BLOCKED)
        os.kill(victim, signal.SIGKILL)

    killer = threading.Thread(target=kill)
    killer.start()
    return killer, victim


def _started_pool(folder, **options):
    """4 controlled slots in 2 workers, after 3 random turns; the same episodes in process."""
    rng = random.Random(1)
    local = [envs.make("household") for _ in range(4)]
    pool = EnvPool(Controlled(folder), 4, num_workers=2, **options)
    pool.reset(range(4), TASKS[:4])
    for env, task in zip(local, TASKS):
        env.reset(task)
    for _ in range(3):
        actions = [rng.choice(env.admissible()) for env in local]
        pool.step(range(4), actions)
        [env.step(a) for env, a in zip(local, actions)]
    return pool, local


def _step_through_a_kill(folder, pool, local):
    """Slot 0 blocks in its step and its worker is killed there; the pool must replay it."""
    killer, victim = _kill_when_blocked(folder, pool, 0)
    actions = [env.expert_action() for env in local]
    steps = pool.step(range(4), ["block-once " + actions[0]] + actions[1:])
    killer.join()
    assert pool.pids()[0] != victim
    assert steps == [env.step(a) for env, a in zip(local, actions)]
    assert pool.snapshot(range(4)) == [env.snapshot() for env in local]
    actions = [env.expert_action() for env in local]
    assert pool.step(range(4), actions) == [env.step(a) for env, a in zip(local, actions)]


def test_worker_killed_mid_step_loses_no_step(tmp_path):
    pool, local = _started_pool(tmp_path)
    with pool:
        _step_through_a_kill(tmp_path, pool, local)
        assert pool.restarts == 1


def test_replacements_that_die_while_restoring_count_toward_max_restarts(tmp_path):
    (tmp_path / DIE_ON_RESTORE).write_text("2")  # two replacements die, the third serves
    pool, local = _started_pool(tmp_path, max_restarts=3)
    with pool:
        _step_through_a_kill(tmp_path, pool, local)
        assert pool.restarts == 3


def test_replacements_that_keep_dying_exhaust_max_restarts_with_every_loss_named(tmp_path):
    (tmp_path / DIE_ON_RESTORE).write_text("100")
    pool, _ = _started_pool(tmp_path, max_restarts=2)
    with pool:
        killer, _ = _kill_when_blocked(tmp_path, pool, 0)
        with pytest.raises(RuntimeError, match="lost 3 times") as error:
            pool.step([0], ["block-once look"])
        killer.join()
        assert str(error.value).count("died while serving (exit code 3)") == 2
        assert pool.restarts == 3


def test_slow_starting_workers_are_not_hung(tmp_path):
    """Building an environment takes longer than a request may: only start_timeout applies."""
    (tmp_path / SLOW_START).write_text("1.5")
    pool, local = _started_pool(tmp_path, timeout=1.0)
    with pool:
        _step_through_a_kill(tmp_path, pool, local)  # the replacement starts slowly too
        assert pool.restarts == 1


def test_hung_worker_is_replaced_then_given_up_on(tmp_path):
    with EnvPool(Controlled(tmp_path), 2, num_workers=2, timeout=2.0, max_restarts=1) as pool:
        pool.reset([0, 1], TASKS[:2])
        with pytest.raises(RuntimeError, match="lost 2 times") as error:
            pool.step([0], ["block look"])
        assert str(error.value).count("hung while serving (no answer within 2 s)") == 2
        assert pool.restarts == 2
        local = [envs.make("household") for _ in range(2)]
        for env, task in zip(local, TASKS):
            env.reset(task)
        actions = [env.expert_action() for env in local]
        assert pool.step([0, 1], actions) == [env.step(a) for env, a in zip(local, actions)]


def test_a_factory_that_raises_is_a_start_error_with_its_traceback():
    with EnvPool(broken_factory, 1, num_workers=1, timeout=None) as pool:
        for _ in range(2):  # raised again, never restarted
            with pytest.raises(WorkerStartError, match="cannot be built"):
                pool.reset([0], TASKS[:1])
        assert pool.restarts == 0


def test_workers_start_on_the_cpu_platform_and_the_parent_keeps_its_own(monkeypatch):
    """A worker on a TPU VM must not open the TPU the trainer holds."""
    for parent in ("tpu,cpu", None):
        if parent is None:
            monkeypatch.delenv("JAX_PLATFORMS")
        else:
            monkeypatch.setenv("JAX_PLATFORMS", parent)
        with EnvPool(platforms_factory, 1, num_workers=1, timeout=None) as pool:
            with pytest.raises(WorkerStartError, match="worker JAX_PLATFORMS=cpu"):
                pool.reset([0], TASKS[:1])
        assert os.environ.get("JAX_PLATFORMS") == parent


def test_one_slots_error_leaves_the_other_slots_done_and_the_pipes_in_step():
    """Slot 0 errs; slots 1 (another worker) and 2 (the same worker) complete, keep their
    snapshots, and the next calls get their own replies."""
    local = [envs.make("household") for _ in range(3)]
    with EnvPool("household", 4, num_workers=2) as pool:
        pool.reset(range(3), TASKS[:3])
        for env, task in zip(local, TASKS):
            env.reset(task)
        actions = [None] + [env.expert_action() for env in local[1:]]
        with pytest.raises(WorkerError, match=r"worker 0, slot 0:(.|\n)*an action is a str"):
            pool.step([0, 1, 2], actions)
        local[1].step(actions[1])
        local[2].step(actions[2])
        assert pool.snapshot([1, 2]) == [local[1].snapshot(), local[2].snapshot()]
        actions = [env.expert_action() for env in local]
        assert pool.step([0, 1, 2], actions) == [env.step(a) for env, a in zip(local, actions)]


def test_a_script_without_a_main_guard_gets_the_workers_real_error(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(
        "import envs\n"
        "from envs.pool import EnvPool\n"
        "with EnvPool('household', 2, num_workers=1) as pool:\n"
        "    pool.reset([0], [envs.Task('household', 'train', 0)])\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=os.getcwd(),
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert run.returncode != 0
    raised = run.stderr.find("envs.pool.WorkerStartError: worker 0 failed while starting")
    assert raised >= 0, run.stderr
    # The parent's error carries the worker's own traceback, which names the fix.
    assert 'create the pool under `if __name__ == "__main__":`' in run.stderr[raised:]
    assert "max_restarts" not in run.stderr


def test_environment_errors_surface_with_the_traceback():
    with EnvPool("household", 2, num_workers=1) as pool:
        with pytest.raises(WorkerError, match="reset"):
            pool.step([0], ["look"])  # no episode yet
        pool.reset([0], TASKS[:1])
        assert pool.step([0], ["look"])[0].info["valid"]
        with pytest.raises(ValueError, match="out of range"):
            pool.step([5], ["look"])
        with pytest.raises(ValueError, match="repeat"):
            pool.step([0, 0], ["look", "look"])
        with pytest.raises(RuntimeError, match="no episode"):
            pool.snapshot([1])


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids, seconds=10.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_close_and_a_killed_parent_leave_no_workers():
    pool = EnvPool("household", 2, num_workers=2)
    pids = pool.pids()
    pool.close()
    assert _wait_gone(pids)
    script = ("from envs.pool import EnvPool; import time\n"
              "pool = EnvPool('household', 2, num_workers=2)\n"
              "print(*pool.pids(), flush=True); time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and not any(_gone(p) for p in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _wait_gone(pids)
