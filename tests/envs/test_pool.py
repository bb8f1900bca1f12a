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
from envs.pool import EnvPool, WorkerError
from tests.envs.slow_env import SlowHousehold

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


def test_worker_killed_mid_step_loses_no_step():
    rng = random.Random(1)
    local = [envs.make("household") for _ in range(4)]
    with EnvPool(SlowHousehold, 4, num_workers=2, timeout=30) as pool:
        pool.reset(range(4), TASKS[:4])
        for env, task in zip(local, TASKS):
            env.reset(task)
        for _ in range(3):
            actions = [rng.choice(env.admissible()) for env in local]
            pool.step(range(4), actions)
            [env.step(a) for env, a in zip(local, actions)]
        victim = pool.pids()[0]
        killer = threading.Timer(0.3, os.kill, (victim, signal.SIGKILL))
        killer.start()
        # Slot 0 (worker 0) sleeps in its step; the kill lands mid-step.
        actions = [local[s].expert_action() for s in range(4)]
        steps = pool.step(range(4), ["slow " + actions[0]] + actions[1:])
        killer.join()
        assert pool.restarts == 1 and pool.pids()[0] != victim
        assert steps == [env.step(a) for env, a in zip(local, actions)]
        assert pool.snapshot(range(4)) == [env.snapshot() for env in local]
        actions = [env.expert_action() for env in local]
        assert pool.step(range(4), actions) == [env.step(a) for env, a in zip(local, actions)]


def test_hung_worker_is_replaced_then_given_up_on():
    with EnvPool(SlowHousehold, 2, num_workers=2, timeout=0.3, max_restarts=1) as pool:
        pool.reset([0, 1], TASKS[:2])
        with pytest.raises(RuntimeError, match="died 2 times"):
            pool.step([0], ["slow look"])
        assert pool.restarts == 2
        local = [envs.make("household") for _ in range(2)]
        for env, task in zip(local, TASKS):
            env.reset(task)
        actions = [env.expert_action() for env in local]
        assert pool.step([0, 1], actions) == [env.step(a) for env, a in zip(local, actions)]


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
