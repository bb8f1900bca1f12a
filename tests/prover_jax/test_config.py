"""Config files and dotted overrides: defaults from the dataclasses, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

import envs
from prover_jax import credit
from prover_jax.config import load, to_dict
from prover_jax.run_settings import TrainConfig
from prover_jax.train import main

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_overrides_change_only_what_they_name(tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text("credit: prover\nsampling:\n  max_context: 4096\n"
                    "learner:\n  optimizer:\n    learning_rate: 1e-6\n")
    config = load(TrainConfig, file, ["steps=7", "sampling.max_context=null",
                                      "learner.loss.aggregation=dr-grpo"])
    expected = to_dict(TrainConfig())
    expected.update(credit="prover", steps=7)
    expected["learner"]["optimizer"]["learning_rate"] = 1e-6
    expected["learner"]["loss"]["aggregation"] = "dr-grpo"
    assert to_dict(config) == expected  # the default factory's max_new_tokens=16 survives
    assert config.sampling.max_new_tokens == 16 and config.sampling.max_context is None
    assert load(TrainConfig, tmp_path / "run.yaml", ["credit=grpo"]).credit == "grpo"


@pytest.mark.parametrize(("overrides", "message"), [
    (["learner.optimizer.lr=1"], "unknown key learner.optimizer.lr; OptimizerConfig has"),
    (["steps=many"], "steps: expected int, got 'many'"),
    (["steps=2.5"], "steps: expected int, got 2.5"),
    (["sampling.reuse_cache=1"], "sampling.reuse_cache: expected bool, got 1"),
    (["learner.compute_dtype=float16"], "learner.compute_dtype: 'float16' is not one of"),
    (["sampling.temperature=hot"], "sampling.temperature: expected float, got 'hot'"),
    (["sampling=3"], "sampling: expected a mapping, got int"),
    (["steps"], "expected dotted.key=value"),
    (["steps=0"], ">= 1"),  # the dataclass's own check
])
def test_bad_settings_name_the_key(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load(TrainConfig, None, overrides)


def test_a_file_that_is_not_a_mapping(tmp_path):
    (tmp_path / "list.yaml").write_text("- steps: 3\n")
    with pytest.raises(ValueError, match="mapping of settings"):
        load(TrainConfig, tmp_path / "list.yaml")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_load_and_fit_their_environment(path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_URL", "http://127.0.0.1:9")  # made, never contacted
    config = load(TrainConfig, path)
    assert credit.registry.trainable(credit.get(config.credit))
    assert (config.max_actions or envs.make(config.env).max_turns) <= (
        envs.make(config.env).max_turns)


def test_the_tiny_config_is_the_default_run():
    assert load(TrainConfig, next(p for p in CONFIGS if p.stem == "tiny-cpu")) == TrainConfig()


def test_the_command_line_reports_bad_settings(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--set", "learner.optimizer.lr=1"])
    assert exit_.value.code == 2 and "unknown key learner.optimizer.lr" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--config", str(tmp_path / "missing.yaml")])
    assert "missing.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((CONFIGS[0].parent / "sft").glob("*.yaml")))
def test_shipped_sft_configs_load(path):
    from prover_jax.run_settings import SftConfig

    config = load(SftConfig, path)
    assert config.steps >= config.eval_every > 0 and envs.make(config.env)
