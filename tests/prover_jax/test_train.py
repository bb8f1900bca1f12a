"""The training loop end to end on household with a tiny model, and its resume."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import envs
from prover_jax import runs
from prover_jax.batch import Batch
from prover_jax.config import to_dict, without_secrets
from prover_jax.credit.hosts import HostOptions
from prover_jax.learner import Checkpoints, Learner, LearnerConfig, LossConfig, OptimizerConfig
from prover_jax.model_policy import SamplingConfig
from prover_jax.plot import read_metrics
from prover_jax.rollout import Episode
from prover_jax.run_files import check_run_config, write_run_config
from prover_jax.run_settings import AsyncConfig, TrainConfig
from prover_jax.settings import ChatConfig, EvalConfig
from prover_jax.train import closing_lines, credit_lines, main
from prover_jax.trainer import (
    advantage_mass,
    environment_texts,
    step_line,
    step_metrics,
    task_split,
    tiny_model,
    tiny_tokenizer,
    train,
)


@pytest.mark.slow
def test_train_runs_and_resumes(tmp_path):
    tokenizer = tiny_tokenizer(environment_texts(envs.make("household"), episodes=5))
    cfg, params = tiny_model(len(tokenizer))
    # A random model rarely succeeds, so the outcome advantage may be 0 everywhere; the k1 KL
    # term's gradient at the reference is not, so the first step moves the params for certain.
    config = TrainConfig(credit="prover+vict", steps=1, groups=2, group_size=2, max_actions=2,
                         workers=1, run_dir=str(tmp_path), host=HostOptions(continuations=2),
                         sampling=SamplingConfig(max_new_tokens=4, min_prompt_tokens=512),
                         eval_every=1, eval_at_start=True,
                         evaluation=EvalConfig(tasks=2, samples=2),
                         learner=LearnerConfig(optimizer=OptimizerConfig(learning_rate=1e-3),
                                               compute_dtype="float32",
                                               loss=LossConfig(kl_coef=0.05, kl_estimator="k1")))
    lines = []
    first = train(config, cfg, params, tokenizer, log=lines.append)
    assert [row["step"] for row in first] == [0]
    # where the tasks came from, said and recorded
    assert lines[0] == "tasks of household: generated (train 3553, eval 134)"
    assert json.loads((tmp_path / "tasks.json").read_text()) == {
        "env": "household", "tasks": "generated", "splits": {"train": 3553, "eval": 134}}
    before = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert before["step"] == -1 and before["eval/greedy/episodes"] == 2  # the initial model's
    assert lines[2] == (f"before the first step: held-out greedy success "
                        f"{before['eval/greedy/success']:.3f}, held-out sampled success "
                        f"{before['eval/sampled/success']:.3f}")
    row = first[0]
    # held-out evaluation in the same metrics, greedy and sampled, under the run's caps
    assert row["eval/greedy/episodes"] == 2 and row["eval/sampled/episodes"] == 4
    assert row["eval/greedy/actions"] <= 2 and "eval/sampled/pass^2" in row
    # the run directory is a model: its tokenizer, config and newest checkpoint
    loaded_cfg, _, loaded_tokenizer = runs.load(tmp_path)
    assert loaded_cfg == cfg and loaded_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert row["episode/actions"] == 2 and "credit/vict/abstained" in row
    assert row["credit/vict/abstained"] == pytest.approx(sum(  # every reason, always logged
        v for k, v in row.items() if k.startswith("credit/vict/abstain/")))
    assert "credit/vict/abstain/near-tie" in row
    assert "credit/prover/eligible_groups" in row and row["episode/overflow"] == 0
    # the learner's first look at the sampled streams: same params, so only float rounding
    assert row["learner/behaviour_gap"] < 1e-4 and row["learner/behaviour_kl"] < 1e-7
    assert abs(row["learner/kl"]) < 1e-6  # the KL term's reference is the starting model
    assert set(k for k in row if k.startswith("time/")) == {
        "time/rollout_s", "time/credit_s", "time/learner_s", "time/checkpoint_s", "time/eval_s"}
    assert json.loads((tmp_path / "config.json").read_text())["credit"] == "prover+vict"
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert 1 <= len(samples) <= 2 and samples[0]["step"] == 0
    assert samples[0]["reward"] >= samples[-1]["reward"]  # the group's best, then its worst
    assert len(samples[0]["actions"]) == 2 and samples[0]["observation"]
    assert {"action", "valid", "observation", "credit", "parts"} == set(samples[0]["actions"][0])
    for action in samples[0]["actions"]:  # the credit by source, summing to it
        assert list(action["parts"]) == ["outcome", "prover", "vict"]
        assert sum(action["parts"].values()) == pytest.approx(action["credit"], abs=1e-6)
    # no eval.png: a random model's held-out figures after step 0 are those before it, constant
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "credit-mass.png", "credit-prover.png", "credit-vict.png", "time.png", "training.png"]
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 1
    # A killed run's metrics after its last checkpoint are redone on resume, and it says so.
    metrics, proofs = tmp_path / "metrics.jsonl", tmp_path / "vict_proofs.jsonl"
    with metrics.open("a") as f:
        f.write(json.dumps({"step": 1, "reward/mean": -1.0}) + "\n")
    proofs.write_text(json.dumps({"step": 0, "turn": 0}) + "\n"
                      + json.dumps({"step": 1, "turn": 0}) + "\n")
    lines = []
    more = train(TrainConfig(**{**config.__dict__, "steps": 2}), cfg, params, tokenizer,
                 log=lines.append)
    assert [row["step"] for row in more] == [1]
    # resumed against the same reference (the starting model), one update away from it
    assert abs(more[0]["learner/kl"]) > 1e-3
    assert lines[1] == f"resumed from {tmp_path}: 1 of 2 steps done"
    assert lines[2] == ("settings changed on resuming (recorded in config_changes.json): "
                        "steps: 1 -> 2")
    assert json.loads((tmp_path / "config_changes.json").read_text()) == [
        {"step": 1, "changes": {"steps": [1, 2]}}]
    assert json.loads((tmp_path / "config.json").read_text())["steps"] == 2
    assert lines[3].startswith("step 2/2: compiling the programs first")
    logged = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert logged == json.loads(json.dumps([before, *first, *more]))  # not evaluated again
    assert [json.loads(line)["step"] for line in proofs.read_text().splitlines()] == [0]
    lines.clear()
    assert train(TrainConfig(**{**config.__dict__, "steps": 2}), cfg, params, tokenizer,
                 log=lines.append) == []
    assert lines[1:] == [f"nothing to do: {tmp_path} holds step 2 of 2"]
    # Another config, other tasks or another model in the same directory is an error that
    # changes nothing.
    tasks = tmp_path / "tasks.json"
    played = tasks.read_text()
    tasks.write_text(played.replace('"generated"', '"ALFWorld data"'))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=r"other tasks \(household: ALFWorld data \(train "
                                         r"3553, eval 134\)\) than this environment has now "
                                         r"\(household: generated"):
        train(config, cfg, params, tokenizer, log=lambda line: None)
    tasks.write_text(played)
    before["tasks.json"] = tasks.read_bytes()
    with pytest.raises(ValueError, match=r"another config \(group_size: 2 -> 4\)"):
        train(TrainConfig(**{**config.__dict__, "group_size": 4}), cfg, params, tokenizer,
              log=lambda line: None)
    other_cfg, other_params = tiny_model(len(tokenizer) + 8)
    with pytest.raises(ValueError, match="belongs to another model"):
        train(config, other_cfg, other_params, tokenizer, log=lambda line: None)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1", "2"]


@pytest.mark.slow
def test_tree_and_scheduled_rollouts(tmp_path):
    """spo-tree trains on its trees' leaves (here a step ahead of the learner, asynchronous);
    budget-matched GRPO's schedule sets each step's group size."""
    tokenizer = tiny_tokenizer(environment_texts(envs.make("household"), episodes=5))
    cfg, params = tiny_model(len(tokenizer))
    small = {"groups": 1, "max_actions": 2, "workers": 1,
             "sampling": SamplingConfig(max_new_tokens=4, min_prompt_tokens=512)}
    quiet = {"log": lambda line: None}
    scheduled = train(TrainConfig(credit="budget-matched-grpo", steps=2, **small,
                                  credit_config={"schedule": ((0, 2), (1, 3))},
                                  run_dir=str(tmp_path / "scheduled")),
                      cfg, params, tokenizer, **quiet)
    assert [row["episode/count"] for row in scheduled] == [2, 3]
    tree = train(TrainConfig(credit="spo-tree", steps=2, **small, run_dir=str(tmp_path / "tree"),
                             credit_config={"depth": 2, "branch_actions": 1},
                             asynchronous=AsyncConfig(max_staleness=1)),
                 cfg, params, tokenizer, **quiet)[1]
    assert tree["async/staleness"] == 1
    # 2-2 branching, one action a level: 4 leaves of 2 actions, unless the episode ended
    assert tree["episode/count"] <= 4 and tree["episode/actions"] <= 2
    assert tree["credit/spo/tree_leaves"] == tree["episode/count"]
    assert np.isfinite(tree["learner/loss"])


@pytest.mark.slow
def test_a_positive_control_trains_and_the_choice_probe_is_logged(tmp_path):
    """The dense oracle credit on household-pivot, with the choice probe as the only
    evaluation, before the first update and after the last, and the parts' shares of the
    advantage mass and of the gradient norm."""
    tokenizer = tiny_tokenizer(environment_texts(envs.make("household-pivot"), episodes=3))
    cfg, params = tiny_model(len(tokenizer))
    config = TrainConfig(env="household-pivot", credit="oracle-progress", steps=1, groups=1,
                         group_size=2, max_actions=3, workers=1, run_dir=str(tmp_path),
                         sampling=SamplingConfig(max_new_tokens=4, min_prompt_tokens=512),
                         eval_every=1, eval_at_start=True, gradient_shares_every=1,
                         evaluation=EvalConfig(greedy=False, samples=0, probe_tasks=3))
    rows = train(config, cfg, params, tokenizer, log=lambda line: None)
    logged = [row for row in read_metrics(tmp_path) if "eval/probe/score" in row]
    assert [row["step"] for row in logged] == [-1, 0]
    assert all(row["eval/probe/states"] == 3 and 0 <= row["eval/probe/score"] <= 1
               and not any(k.startswith("eval/greedy") for k in row) for row in logged)
    assert rows[0]["credit/oracle_progress/mean_abs_gain"] >= 0
    for kind in ("mass", "grad_share"):
        shares = [rows[0][f"credit/{kind}/{part}"] for part in ("outcome", "oracle-progress")]
        assert sum(shares) == pytest.approx(1.0) or shares == [0.0, 0.0]
    assert rows[0]["time/grad_shares_s"] > 0


def test_train_config_errors():
    with pytest.raises(ValueError, match=r"unknown key credit_config\.lamda"):
        TrainConfig(credit="prover", credit_config={"lamda": 0.5})
    with pytest.raises(ValueError, match=r"credit_config\.base\.lam: expected float"):
        TrainConfig(credit="prover+vict", credit_config={"base": {"lam": "high"}})
    with pytest.raises(ValueError, match="unknown credit method"):
        TrainConfig(credit="nonexistent")
    with pytest.raises(ValueError, match=">= 1"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="temperature 1"):
        TrainConfig(sampling=SamplingConfig(temperature=0.7))


def test_vict_on_tasks_without_a_verifier_is_refused_before_anything_runs(tmp_path,
                                                                          monkeypatch):
    """ALFWorld data whose goals slice (not among the six task types) has no VICT atoms."""
    pytest.importorskip("alfworld")
    from envs.alfworld import games
    from envs.alfworld.engine import goal_library

    game = games.generated_game(0, small=True)[1]
    sliced = goal_library.gdict["pick_and_place_simple_slice"]["pddl"].format(
        obj="Apple", recep="Fridge", toggle="", mrecep="").replace("#", "-")
    game["pddl_problem"] = game["pddl_problem"][:game["pddl_problem"].find("(:goal")] + sliced
    for split in games.DATA_SPLITS:
        trial = tmp_path / "json_2.1.1" / split / "pick_and_place_simple-Apple-None-Fridge-1"
        trial.mkdir(parents=True)
        (trial / "trial_1").mkdir()
        (trial / "trial_1" / "game.tw-pddl").write_text(json.dumps(game))
        (trial / "trial_1" / "traj_data.json").write_text(
            json.dumps({"task_type": "pick_and_place_simple"}))
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    config = TrainConfig(env="alfworld", credit="prover+vict")
    with pytest.raises(ValueError, match=r"'prover\+vict' needs the environment's VICT "
                                         r"verifier.*issliced"):
        train(config, None, None, None, log=lambda line: None)


def test_a_run_directory_never_holds_an_api_key(tmp_path):
    from prover_jax.judges import AgenticConfig
    from prover_jax.judges.critic import CriticConfig

    secret = "sk-do-not-print-0123"
    config = TrainConfig(host=HostOptions(judge="agentic", judge_config={"api_key": secret},
                                          critic_config={"api_key": secret, "model": "m"}))
    write_run_config(tmp_path, config)
    written = (tmp_path / "config.json").read_text()
    assert secret not in written and json.loads(written)["host"]["judge_config"] == {
        "api_key": "<redacted>"}
    check_run_config(tmp_path, config)  # the same run resumes, whatever its key now
    check_run_config(tmp_path, dataclasses.replace(  # and with what does not change the math
        config, steps=9, checkpoint_every=3, eval_every=2, workers=4,
        evaluation=dataclasses.replace(config.evaluation, tasks=7)))
    check_run_config(tmp_path, TrainConfig(host=HostOptions(
        judge="agentic", judge_config={"api_key": "another"},
        critic_config={"api_key": "another", "model": "m"})))
    with pytest.raises(ValueError, match=r"host\.critic_config\.model"):
        check_run_config(tmp_path, TrainConfig(host=HostOptions(
            judge="agentic", judge_config={"api_key": secret},
            critic_config={"api_key": secret, "model": "other"})))
    for settings in (AgenticConfig(api_key=secret), CriticConfig(api_key=secret)):
        assert secret not in repr(settings) and secret not in str(settings)


def test_a_run_from_before_the_chat_setting_resumes(tmp_path):
    resolved = TrainConfig(chat=ChatConfig())
    written = without_secrets(to_dict(resolved))
    del written["chat"]  # as a run directory written before the setting existed
    (tmp_path / "config.json").write_text(json.dumps(written))
    check_run_config(tmp_path, resolved)
    with pytest.raises(ValueError, match=r"chat\.reply: 'text' -> 'tool_call'"):
        check_run_config(tmp_path, TrainConfig(chat=ChatConfig("tool_call")))


def test_a_run_from_before_a_setting_existed_resumes_with_its_default(tmp_path):
    written = without_secrets(to_dict(TrainConfig()))
    del written["asynchronous"], written["architecture"]  # settings added since
    (tmp_path / "config.json").write_text(json.dumps(written))
    check_run_config(tmp_path, TrainConfig())
    with pytest.raises(ValueError, match=r"asynchronous\.max_staleness: 0 -> 1"):
        check_run_config(tmp_path, TrainConfig(asynchronous=AsyncConfig(max_staleness=1)))


@pytest.mark.parametrize(("argv", "message"), [
    (["--steps", "0"], ">= 1"), (["--groups", "0"], ">= 1"),
    (["--env", "nonexistent"], "unknown environment 'nonexistent'"),
    (["--env", "tau-airline", "--split", "train"], "no split 'train'"),
    (["--match-budget", "runs/x"], "pass --credit budget-matched-grpo"),
    (["--credit", "budget-matched-grpo", "--match-budget", "/nonexistent"], "no metrics"),
    (["--set", "credit_config.lamda=1", "--credit", "prover"], "unknown key credit_config.lamda"),
    (["--init", "/nonexistent"], "neither a run directory"),
    (["--set", "chat.reply=json"], "chat.reply must be one of"),
    (["--set", "chat.template.enable_thinking=false"],
     "'enable_thinking' is not one the model's chat template reads"),
    (["--env", "alfworld", "--set", "env_options.data=/nonexistent"],
     "alfworld: no 'train' split under /nonexistent"),
    (["--set", "env_options.data=/nonexistent"], "unexpected keyword argument 'data'"),
    (["--set", "architecture=qwen4-1b"], "unknown architecture 'qwen4-1b'"),
    (["--set", "architecture=qwen3-0.6b", "--env", "household-small", "--init",
      "experiments/results/runs/sft"],
     "written for qwen3-0.6b, and the model it starts from has vocab_size 812 (not 151936)"),
])
def test_bad_command_lines_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_chat_setting_left_to_the_model_is_compared_only_once_resolved(tmp_path):
    write_run_config(tmp_path, TrainConfig(chat=ChatConfig("text")))
    check_run_config(tmp_path, TrainConfig())  # None: the model's, known once it loads
    with pytest.raises(ValueError, match=r"chat\.reply: 'text' -> 'tool_call'"):
        check_run_config(tmp_path, TrainConfig(chat=ChatConfig("tool_call")))


def test_a_run_resumes_on_the_same_tasks_from_another_folder_but_not_on_other_tasks(tmp_path):
    from prover_jax.run_files import check_run_tasks, write_run_tasks

    here = {"env": "alfworld", "tasks": "ALFWorld data", "data": "/home/a/alfworld",
            "eval": "valid_unseen", "splits": {"train": 3, "eval": 1}}
    write_run_tasks(tmp_path, here)
    check_run_tasks(tmp_path, {**here, "data": "/mnt/b/alfworld"})  # the run moved machines
    with pytest.raises(ValueError, match=r"other tasks \(alfworld: ALFWorld data"):
        check_run_tasks(tmp_path, {"env": "alfworld", "tasks": "generated",
                                   "splits": {"train": 3553, "eval": 134}})
    with pytest.raises(ValueError, match="other tasks"):
        check_run_tasks(tmp_path, {**here, "splits": {"train": 4, "eval": 1}})


def test_the_split_defaults_to_one_the_environment_has():
    assert task_split(envs.make("household"), None) == "train"
    assert task_split(envs.make("tau-airline"), None) == "test"


KILL_ARGS = ["--steps", "3", "--groups", "2", "--group-size", "2", "--checkpoint-every", "1",
             "--set", "max_actions=2", "--set", "workers=1", "--set", "host.continuations=2",
             "--set", "sampling.max_new_tokens=4", "--set", "sampling.min_prompt_tokens=512"]


def without_times(rows):  # wall-clock seconds are the one thing that may differ
    return [{k: v for k, v in row.items() if not k.startswith("time/")
             and not k.endswith("wall_s")} for row in rows]


def _interrupt_when(process: subprocess.Popen, metrics: Path, lines: int, signum: int) -> str:
    """Sends ``signum`` to the training process (and its workers) once ``metrics`` holds
    ``lines`` lines, that is in the middle of the next step; its output once it exits."""
    while process.poll() is None and not (
            metrics.exists() and len(metrics.read_text().splitlines()) >= lines):
        time.sleep(0.05)
    os.killpg(process.pid, signum)
    return process.communicate()[0].decode()


@pytest.mark.slow
def test_a_run_interrupted_and_resumed_is_bit_identical_to_an_uninterrupted_one(tmp_path):
    """A training process sent SIGTERM in the middle of step 1 finishes the step, saves it
    (checkpoints are due only every 3 steps), says how to resume and exits with 143; resumed
    from there,
    and SIGKILLed in the middle of step 3, and resumed again, it matches a run that never
    stopped: same metrics, same params, same key and data position. prover+vict runs both
    ProVer's and VICT's host sides on top of GRPO's. (A random model wins no episode, so no
    group reaches ProVer's judge: the random draws are the rollouts'.)"""
    args = [*KILL_ARGS, "--credit", "prover+vict", "--steps", "4", "--checkpoint-every", "3"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    main([*args, "--run-dir", str(whole)])
    metrics = cut / "metrics.jsonl"

    def started() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "prover_jax.train", *args, "--run-dir",
                                 str(cut)], start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    process = started()
    output = _interrupt_when(process, metrics, 1, signal.SIGTERM)
    assert process.returncode == 128 + signal.SIGTERM, output[-2000:]
    done = len(read_metrics(cut))  # 2, or 1 when the signal came before step 0's end
    said = (f"stopped by SIGTERM after step {done}: saved; resume it with the same "
            f"command (--run-dir {cut})")
    assert said in output and "Traceback" not in output
    process = started()
    output = _interrupt_when(process, metrics, 3, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL, output[-2000:]
    assert f"{done} of 4 steps done" in output  # the signal's checkpoint, not a due one
    assert len(metrics.read_text().splitlines()) < 5
    main([*args, "--run-dir", str(cut)])
    assert without_times(read_metrics(cut)) == without_times(read_metrics(whole))
    assert [row["step"] for row in read_metrics(cut)] == [0, 1, 2, 3]
    tokenizer = tiny_tokenizer(environment_texts(envs.make("household")))
    cfg, _ = tiny_model(len(tokenizer))
    learner = Learner(cfg, TrainConfig().learner)
    states = [Checkpoints(run / "checkpoints").restore(learner.abstract_state())
              for run in (whole, cut)]
    assert int(states[0].step) == int(states[1].step) == 4
    for a, b in zip(jax.tree.leaves(states[0]), jax.tree.leaves(states[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_a_signal_in_any_phase_of_a_step_stops_after_that_step(tmp_path, monkeypatch):
    """SIGTERM or SIGINT in each phase of a step (the rollout, the credit, the learner, the
    write of a due checkpoint, and the last step's) lets the step finish, saves it once and
    stops, naming the steps done as the progress line counts them; each resume goes on from
    there."""
    from prover_jax import trainer
    from prover_jax.interrupt import Interrupted

    tokenizer = tiny_tokenizer(environment_texts(envs.make("household"), episodes=3))
    cfg, params = tiny_model(len(tokenizer))
    config = TrainConfig(env="household", steps=5, groups=1, group_size=2, max_actions=2,
                         workers=1, checkpoint_every=1, run_dir=str(tmp_path),
                         sampling=SamplingConfig(max_new_tokens=4, min_prompt_tokens=512))
    lap = trainer.Laps.lap
    stops = [("rollout", signal.SIGTERM), ("credit", signal.SIGINT),
             ("learner", signal.SIGTERM), ("checkpoint", signal.SIGTERM),
             ("checkpoint", signal.SIGINT)]  # the last step's, after its own checkpoint
    for done, (phase, signum) in enumerate(stops, start=1):
        sent = []

        def signalling_lap(laps, name, phase=phase, signum=signum, sent=sent):
            if name == phase and not sent:
                sent.append(os.kill(os.getpid(), signum))
            lap(laps, name)

        monkeypatch.setattr(trainer.Laps, "lap", signalling_lap)
        with pytest.raises(Interrupted) as stopped:
            train(config, cfg, params, tokenizer, log=lambda line: None)
        assert str(stopped.value).startswith(
            f"stopped by {signal.Signals(signum).name} after step {done}: saved")
        assert stopped.value.exit_code == 128 + signum
        assert [row["step"] for row in read_metrics(tmp_path)] == list(range(done))
        assert max(Checkpoints(tmp_path / "checkpoints").steps()) == done
    monkeypatch.setattr(trainer.Laps, "lap", lap)
    assert train(config, cfg, params, tokenizer, log=lambda line: None) == []  # all done


def test_a_finished_run_names_its_result_files_and_plots(tmp_path):
    (tmp_path / "plots").mkdir()
    for name in ("vict_proofs.jsonl", "plots/credit.png", "plots/reward.png"):
        (tmp_path / name).touch()
    rows = [{"step": -1, "eval/greedy/success": 0.2}, {"step": 0},
            {"step": 1, "eval/greedy/success": 0.3}, {"step": 2}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = closing_lines(tmp_path)
    assert lines[0] == "held-out greedy success: 0.200 before training, 0.300 after step 2"
    assert lines[1] == (f"run directory: {tmp_path} (metrics.jsonl, vict_proofs.jsonl; model/ "
                        "for evaluate and serve)")
    assert lines[2] == f"plots: {tmp_path / 'plots'} (credit.png, reward.png)"
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[2]) + "\n")
    assert lines[0] != closing_lines(tmp_path)[0] == "held-out greedy success: 0.300 after step 2"
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[1]) + "\n")
    assert len(closing_lines(tmp_path)) == 3  # no evaluation, no line for it


def test_a_finished_run_shows_the_group_most_sources_of_credit_acted_on(tmp_path):
    def action(text: str, outcome: float, prover: float, vict: float) -> dict:
        parts = {"outcome": outcome, "prover": prover, "vict": vict}
        return {"action": text, "parts": parts, "credit": sum(parts.values())}

    flat = {"step": 0, "task": "household/train/3", "group": 0, "member": 1, "reward": 1.0,
            "actions": [action("go to sink 1", 0.5, 0.0, 0.0)]}
    acted = {"step": 1, "task": "household/train/7", "group": 2, "member": 0, "reward": 1.0,
             "actions": [action("go to sink 1", 0.5, 0.0, 0.0),
                         action("take apple 1 from sink 1", 0.5, 0.25, -0.125)]}
    failed = {**acted, "member": 3, "reward": 0.0, "actions": [action("look", -0.5, 0, 0)]}
    # another process's group of the same step, and a later step that only VICT moved further
    other_process = {**acted, "group": 5, "member": 6, "actions": [action("look", 0.5, 0, 0.1)]}
    one_source = {**flat, "step": 2, "actions": [action("go to sink 1", 0.5, 0.0, 3.0)]}
    (tmp_path / "samples.jsonl").write_text("".join(
        json.dumps(r) + "\n" for r in (flat, acted, failed, other_process, one_source)))
    lines = credit_lines(tmp_path, width=26)
    assert lines[0].startswith("credit at step 2, group 2 (household/train/7): outcome is the "
                               "flat advantage GRPO gives every action, prover, vict what")
    assert lines[1:] == [
        " episode 0 (reward 1)",
        "  turn  action                      outcome   prover     vict    total",
        "     0  go to sink 1                 +0.500   +0.000   +0.000   +0.500",
        "     1  take apple 1 from sink 1     +0.500   +0.250   -0.125   +0.625",
        " episode 3 (reward 0)",
        "  turn  action                      outcome   prover     vict    total",
        "     0  look                         -0.500   +0.000   +0.000   -0.500"]
    # a GRPO run's group: the method's part is 0 throughout and left out; a rejected action
    # marked, its controls escaped
    grpo = {**failed, "actions": [{"action": "go\tto sink 1\n", "valid": False, "credit": 0.5,
                                   "parts": {"outcome": 0.5, "grpo": 0.0}}]}
    (tmp_path / "samples.jsonl").write_text(json.dumps(grpo) + "\n")
    assert credit_lines(tmp_path, width=26) == [
        ("credit at step 2, group 2 (household/train/7): outcome is the flat advantage GRPO "
        "gives every action"),
        " episode 3 (reward 0)",
        "  turn  action                      outcome    total",
        "     0 !go\\tto sink 1\\n              +0.500   +0.500",
        " (! the environment rejected the action)"]
    (tmp_path / "samples.jsonl").write_text(json.dumps(
        {**grpo, "actions": [{**a, "parts": {"outcome": 0.0, "grpo": 0.0}, "credit": 0.0}
                             for a in grpo["actions"]]}) + "\n")
    assert credit_lines(tmp_path) == [
        ("credit: none in any sampled group (in each, every episode had the same reward, so "
        "GRPO's advantage is 0, and the method added nothing)")]
    (tmp_path / "samples.jsonl").unlink()
    assert credit_lines(tmp_path) == []


def test_a_step_counts_the_groups_holding_both_a_success_and_a_failure():
    def group(*rewards):
        return [Episode(envs.Task("chain", "train", 0), reward=r) for r in rewards]

    groups = [group(1.0, 0.0), group(1.0, 1.0), group(0.0, 0.5), group(0.5, 1.5)]
    metrics = step_metrics(groups, {}, {}, {})
    assert metrics["success/mixed_groups"] == 0.5  # the first and the last
    assert metrics["success/rate"] == 0.5 and metrics["episode/count"] == 8.0


def test_a_parts_advantage_mass_counts_each_policy_token_of_its_turns():
    rng = np.random.default_rng(0)
    rows, turns, length = 3, 4, 12
    turn_ids = np.where(rng.random((rows, length)) < 0.7,
                        rng.integers(0, turns, (rows, length)), -1).astype(np.int32)
    loss_mask = (turn_ids >= 0) & (rng.random((rows, length)) < 0.8)
    batch = Batch(np.zeros((rows, length), np.int32), loss_mask, turn_ids, np.zeros(rows, np.int32),
                  np.zeros(rows, np.float32), np.ones((rows, turns), bool))
    parts = {"outcome": rng.normal(size=(rows, turns)), "prover": rng.normal(size=(rows, turns))}
    parts["prover"][:, 0] = 0.0
    mass = {name: sum(abs(value[b, turn_ids[b, u]]) for b in range(rows) for u in range(length)
                      if loss_mask[b, u]) for name, value in parts.items()}
    shares = advantage_mass(parts, batch)
    assert shares == pytest.approx({f"credit/mass/{name}": value / sum(mass.values())
                                    for name, value in mass.items()})
    silent = advantage_mass({name: np.zeros((rows, turns)) for name in parts}, batch)
    assert silent == {"credit/mass/outcome": 0.0, "credit/mass/prover": 0.0}


def test_a_step_logs_one_short_line_of_its_key_figures():
    row = {"step": 4, "reward/mean": 0.25, "success/rate": 0.25, "learner/loss": 0.0123,
           "learner/grad_norm": 0.5, "credit/prover/accepted": 2.0, "credit/prover/judge_cost": 0.1,
           "time/rollout_s": 3.0, "time/learner_s": 1.5}
    assert step_line(row, 10) == ("step 5/10: reward 0.250, success 0.250, loss 0.0123, "
                                  "accepted 2 | 4.5 s")
    assert step_line({"step": 0, "sft/nll": 2.5, "time/learner_s": 1.0}, 3) == (
        "step 1/3: nll 2.5 | 1.0 s")
    corrected = {**row, "learner/is_truncated": 0.0125, "learner/is_weight": 1.0,
                 "async/staleness": 1.0}
    assert ", IS truncated 0.0125, staleness 1," in step_line(corrected, 10)
