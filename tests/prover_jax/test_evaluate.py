"""The evaluation harness: pass^k against brute force, each environment's metrics, the expert
and random baselines through the pool, the command line."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

import envs
from envs.household.env import world_of
from envs.pool import EnvPool
from prover_jax.evaluate import main, markdown
from prover_jax.evaluation import evaluate, summarize
from prover_jax.rollout import Episode, ScriptedPolicy
from prover_jax.settings import EvalConfig, eval_split, pass_at_k


@pytest.mark.parametrize("samples", [1, 3, 4])
def test_pass_at_k_is_the_chance_that_k_samples_all_succeed(samples):
    rng = np.random.default_rng(samples)
    outcomes = [rng.random(samples) < 0.6 for _ in range(7)]
    for k in range(1, samples + 1):
        brute = np.mean([np.mean([all(o[list(c)]) for c in
                                  itertools.combinations(range(samples), k)])
                         for o in outcomes])
        assert pass_at_k([int(o.sum()) for o in outcomes], samples, k) == pytest.approx(brute)


def _episode(task, reward, turns=2):
    return Episode(task, ("obs",) * (turns + 1), (), (True,) * turns, reward=reward, done=True)


def test_each_environment_reports_its_own_metrics():
    tasks = envs.make("household-small").tasks("eval")[:12]
    groups = [[_episode(t, float(i % 3 == 0)), _episode(t, 0.0)] for i, t in enumerate(tasks)]
    out = summarize(groups)
    assert out["success"] == pytest.approx(4 / 24) and out["episodes"] == 24
    assert out["pass^2"] == 0 and out["pass^1"] == pytest.approx(out["success"])
    for kind in {world_of(t).task_type for t in tasks}:  # per task type, from the worlds
        hits = [float(i % 3 == 0) for i, t in enumerate(tasks) if world_of(t).task_type == kind]
        assert out[f"success/{kind}"] == pytest.approx(np.mean(hits) / 2)
    shop = [[_episode(envs.Task("webshop", "test", i), r)] for i, r in enumerate((1.0, 0.5))]
    assert summarize(shop)["score"] == 0.75 and summarize(shop)["strict_success"] == 0.5
    qa = summarize([[_episode(envs.Task("searchqa", "test", 0), 1.0)]])
    assert qa["exact_match"] == 1.0 and "pass^1" not in qa
    assert "| success | 0.167 |" in markdown({"greedy": out})


def test_the_expert_is_a_ceiling_and_random_actions_a_floor():
    env = envs.make("household-small")
    tasks = env.tasks(eval_split(env))[:6]
    with EnvPool("household-small", 12, num_workers=1) as pool:
        expert = evaluate(pool, ScriptedPolicy(0.0), tasks, 2, random.Random(0))
        floor = evaluate(pool, ScriptedPolicy(1.0), tasks, 2, random.Random(0), max_actions=8)
    assert expert["success"] == 1.0 and expert["pass^2"] == 1.0
    assert floor["success"] < 0.5 and floor["actions"] <= 8


def test_split_and_config_checks():
    assert eval_split(envs.make("household")) == "eval"
    assert eval_split(envs.make("tau-airline")) == "test"
    with pytest.raises(ValueError, match="no split 'dev'"):
        eval_split(envs.make("household"), "dev")
    with pytest.raises(ValueError, match="nothing to run"):
        EvalConfig(greedy=False, samples=0)


def test_the_command_line_writes_json_and_a_table(tmp_path, capsys):
    out = tmp_path / "expert.json"
    main(["--expert", "--env", "household-small", "--tasks", "3", "--workers", "1",
          "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["results"]["expert"]["success"] == 1.0 and report["tasks"] == 3
    assert "| success | 1.000 |" in capsys.readouterr().out
    for argv, message in ((["--env", "household"], "give a model"),
                          (["--expert", "--env", "nonexistent"], "unknown environment"),
                          ([str(tmp_path / "nothing")], "neither a run directory")):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err
