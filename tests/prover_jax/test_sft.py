"""The SFT warm start: demonstrations are the token streams a model's rollout would be, only the
expert's replies are trained on, the loss falls, and a run directory is a model to start from."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jax
import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from models.qwen.chat import ACT_TOOL
from prover_jax import evaluate, runs
from prover_jax.demonstrations import DemonstrationPolicy, demonstrations
from prover_jax.learner import LearnerConfig, OptimizerConfig
from prover_jax.run_settings import SftConfig, TinyModel, demonstrating_env
from prover_jax.settings import ChatConfig, EvalConfig
from prover_jax.sft_trainer import choice_turns, sft, sft_batch
from prover_jax.trainer import initial_model, tiny

ENV = "household-small"
SMALL = TinyModel(vocab_size=512, tokenizer_episodes=10)


@pytest.fixture(scope="module")
def model():
    return tiny(envs.make(ENV), SMALL)


@pytest.fixture(scope="module")
def noisy(model):
    _, _, tokenizer = model
    env = envs.make(ENV)
    policy = DemonstrationPolicy(tokenizer, env.instruction(), ChatConfig(), noise=0.4)
    with EnvPool(ENV, 4, num_workers=1) as pool:
        return demonstrations(pool, policy, env.tasks("train")[:4], random.Random(0), 12)


def test_a_demonstration_is_the_chat_a_model_would_have(model, noisy):
    _, _, tokenizer = model
    system = envs.make(ENV).instruction()
    for episode in noisy:
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": episode.observations[0]}]
        for action, observation in zip(episode.actions, episode.observations[1:]):
            messages += [{"role": "assistant", "content": action.text},
                         {"role": "tool", "content": observation}]
        rendered = tokenizer.apply_chat_template(messages, tools=[ACT_TOOL], tokenize=False)
        stream = episode.stream()
        text = tokenizer.decode(stream.tokens)
        assert rendered.startswith(text) and text.endswith(f"{episode.actions[-1].text}<|im_end|>")
        replies = [tokenizer.decode(stream.tokens[stream.turn_ids == t])
                   for t in range(episode.num_turns)]
        assert replies == [f"{a.text}<|im_end|>" for a in episode.actions]


def test_only_the_experts_replies_are_trained_on(noisy):
    batch, dropped, trained = sft_batch(noisy, 0, 4096)
    assert any(not a.expert for e in noisy for a in e.actions)  # the noise took some turns
    turn_ids = np.asarray(batch.turn_ids)
    for row, episode in enumerate(noisy):
        for turn, action in enumerate(episode.actions):
            tokens = turn_ids[row] == turn
            assert trained[row, tokens].all() == action.expert
            assert dropped[row, tokens].all() != action.expert
        assert not trained[row, turn_ids[row] < 0].any()  # prompts and observations


def test_train_on_choices_trains_only_the_experts_choices_among_lookalikes(model):
    """``train_on: choices``: the loss covers the expert's actions at household-pivot's choice
    states (`Env.oracle_choice`) and nothing else; an environment without the oracle is
    refused by name."""
    _, _, tokenizer = model
    pivot = "household-pivot"
    env = envs.make(pivot, demonstrator="clue")
    policy = DemonstrationPolicy(tokenizer, env.instruction(), ChatConfig(), noise=0.3)
    with EnvPool(pivot, 4, num_workers=1, config={"demonstrator": "clue"}) as pool:
        episodes = demonstrations(pool, policy, env.tasks("train")[:6], random.Random(1))
    turns = [choice_turns(env, e) for e in episodes]
    assert all(turns) and sum(map(len, turns)) < sum(e.num_turns for e in episodes) / 3
    batch, dropped, trained = sft_batch(episodes, 0, 4096, turns=turns)
    turn_ids = np.asarray(batch.turn_ids)
    for row, episode in enumerate(episodes):
        for turn, action in enumerate(episode.actions):
            tokens = turn_ids[row] == turn
            chosen = action.expert and env.oracle_choice(episode.states[turn]) is not None
            assert trained[row, tokens].all() == chosen and dropped[row, tokens].all() != chosen
    assert not trained[turn_ids < 0].any()
    with pytest.raises(ValueError, match="choice oracle; household-small has none"):
        demonstrating_env(SftConfig(env=ENV, train_on="choices"))
    with pytest.raises(ValueError, match="train_on must be"):
        SftConfig(train_on="pivots")


def test_repeated_actions_are_mostly_rejected_and_the_expert_recovers(model):
    _, _, tokenizer = model
    env = envs.make(ENV)
    tasks = env.tasks("train")[:4]
    with EnvPool(ENV, 4, num_workers=1) as pool:
        plain = demonstrations(pool, DemonstrationPolicy(tokenizer, env.instruction(),
                                                         ChatConfig()),
                               tasks, random.Random(0))
        repeating = demonstrations(pool, DemonstrationPolicy(tokenizer, env.instruction(),
                                                             ChatConfig(), repeats=0.3),
                                   tasks, random.Random(0))
    repeats = [(e, t) for e in repeating for t, a in enumerate(e.actions) if not a.expert]
    assert len(repeats) >= 4
    assert all(t > 0 and e.actions[t].text == e.actions[t - 1].text for e, t in repeats)
    assert sum(not e.valid[t] for e, t in repeats) > len(repeats) / 2
    # the expert's own actions are the plain demonstration's (up to the turn limit the
    # repeats bring closer): it takes up where it was after each rejected one
    for ours, theirs in zip(repeating, plain):
        expert = [a.text for a in ours.actions if a.expert]
        assert expert == [a.text for a in theirs.actions][: len(expert)]
        assert ours.reward == 1.0 or ours.num_turns == env.max_turns


@pytest.mark.slow
def test_sft_lowers_the_loss_and_its_run_is_a_model(tmp_path, model):
    cfg, params, tokenizer = model
    config = SftConfig(env=ENV, demonstrations=4, heldout=2, steps=3, batch_size=4,
                       workers=1, max_actions=6, run_dir=str(tmp_path), eval_every=0,
                       evaluation=EvalConfig(tasks=2, samples=0, max_new_tokens=4),
                       learner=LearnerConfig(optimizer=OptimizerConfig(learning_rate=3e-3),
                                             compute_dtype="float32"))
    rows = sft(config, cfg, params, tokenizer, log=lambda line: None)
    losses = [row["sft/nll"] for row in rows]  # the same four demonstrations every step
    assert losses[2] < losses[1] < losses[0]
    assert "sft/heldout_nll" in rows[-1] and "eval/greedy/success" in rows[-1]
    assert json.loads((tmp_path / "config.json").read_text())["env"] == ENV
    loaded_cfg, loaded, loaded_tokenizer = initial_model(SftConfig(env=ENV, init=str(tmp_path)))
    assert loaded_cfg == cfg and loaded_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(loaded),
                                                        jax.tree.leaves(params)))
    assert runs.is_run(tmp_path)
    runs.main([str(tmp_path), str(tmp_path / "exported")])  # the same model, as a model folder
    exported_cfg, exported, exported_tokenizer = runs.load(tmp_path / "exported")
    assert runs.trained_env(tmp_path / "exported") == runs.trained_env(tmp_path / "model") == ENV
    assert exported_cfg == cfg and exported_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(exported),
                                                    jax.tree.leaves(loaded)))
    evaluate.main([str(tmp_path), "--tasks", "2", "--samples", "2", "--max-actions", "2",
                   "--max-new-tokens", "4", "--workers", "1", "--out", str(tmp_path / "e.json")])
    report = json.loads((tmp_path / "e.json").read_text())
    assert report["env"] == ENV and report["results"]["sampled"]["episodes"] == 4
    with pytest.raises(FileNotFoundError, match="neither a run directory"):
        runs.load(tmp_path / "checkpoints")


@pytest.mark.parametrize(("argv", "message"), [
    (["--noise", "1.5"], "noise must be in [0, 1)"),
    (["--set", "repeats=1"], "repeats must be in [0, 1)"), (["--steps", "0"], ">= 1"),
    (["--init", "/nonexistent"], "neither a run directory"),
    (["--set", "chat.reply=json"], "chat.reply must be one of"),
    (["--set", "chat.template=[1]"], "chat.template must map argument names"),
    (["--steps", "4"], "warmup_steps=20 is not shorter than the run (steps=4)"),
])
def test_bad_command_lines_are_usage_errors(argv, message, capsys):
    from prover_jax.sft import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_committed_sft_record_is_a_model_that_knows_its_environment():
    """The record (config.json, metrics, weights in model/, no checkpoints) loads as a run
    and as a model folder, and says it was trained on household-small, which `evaluate`
    then picks, warning when told another."""
    record = Path(__file__).resolve().parents[2] / "experiments/results/runs/sft"
    as_run, as_folder = runs.load(record), runs.load(record / "model")
    assert as_run[0] == as_folder[0]
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(as_run[1]),
                                                    jax.tree.leaves(as_folder[1])))
    assert runs.trained_env(record) == runs.trained_env(record / "model") == "household-small"
    assert evaluate.chosen_env(str(record / "model"), None) == ("household-small", None)
    name, warning = evaluate.chosen_env(str(record), "household")
    assert name == "household" and warning == (
        f"warning: evaluating on household; {record} was trained on household-small")
    assert evaluate.chosen_env(None, None) == ("household", None)
    assert runs.trained_env(record / "metrics.jsonl") is None
