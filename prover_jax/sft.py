"""Supervised warm start on expert demonstrations: ``python -m prover_jax.sft``.

The environment's expert plays ``demonstrations`` training tasks, a share ``noise`` of its
actions replaced by random admissible ones, so that the model also sees states off the
expert's path and the expert's recovery from them. Every episode becomes the token stream a
rollout of the model would have been (`models.qwen.chat.AgentFormat`: the prompt with the
``act`` tool, each reply and the end-of-turn token, each observation block), and the loss is the
negative log-likelihood of the expert's reply tokens: the random actions stay in the context
but are not trained on. The update is the learner's own step with advantage 1 on those tokens
and the current policy as the old one, whose gradient is the NLL's.

The run directory has the trainer's layout (``config.json``, ``model/``, ``checkpoints/``,
``metrics.jsonl``, ``tensorboard/``, ``plots/``) and resumes the same way. Every
``eval_every`` steps it logs the NLL of expert demonstrations on held-out tasks
(``sft/heldout_nll``) and a greedy evaluation of the model on them (``eval/greedy/...``,
`prover_jax.evaluate`). ``python -m prover_jax.train --init RUN_DIR`` then starts RL from the
newest checkpoint, with the run's tokenizer.

Without ``--init`` the model is a tiny random Qwen3 (`TinyModel`, here about 1.1M parameters)
whose byte-level BPE is trained on the environment's observations and actions, so that an
action is a few tokens; its replies are the bare action text (``chat.reply=text``, which the
policy parses as the action). For a real Qwen checkpoint, ``chat.reply=tool_call`` writes the
``act`` tool call the prompt asks for, in the template's own form, and ``chat.template`` sets
the template's arguments (``enable_thinking``). The setting is stored with the model
(`prover_jax.runs`), so RL from the run, its evaluation and the server use it.

This module reads and checks the settings (`SftConfig`) without loading JAX;
`prover_jax.sft_trainer` runs the warm start.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import envs
from prover_jax import compile_cache
from prover_jax.config import add_arguments, overrides
from prover_jax.config import load as load_config
from prover_jax.learner.config import LearnerConfig, OptimizerConfig
from prover_jax.platforms import skip_absent_tpu
from prover_jax.settings import ChatConfig, EvalConfig
from prover_jax.train import (
    TinyModel,
    check_run_config,
    check_warmup,
    exit_when_interrupted,
    run_env,
)
from tpu.mesh_config import MeshConfig


@dataclasses.dataclass(frozen=True)
class SftConfig:
    """A warm-start run. ``tiny`` is the model when ``init`` (a run directory or a model
    folder) is None."""

    env: str = "household-small"
    # the environment's keyword arguments (alfworld: {"data": FOLDER} of ALFWorld's games)
    env_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    split: str | None = None  # the demonstrations' tasks (None: "train", else the first split)
    demonstrations: int = 512  # expert episodes trained on
    noise: float = 0.2  # share of the expert's actions replaced by random ones (not trained on)
    repeats: float = 0.0  # share replaced by the previous action again (`DemonstrationPolicy`)
    chat: ChatConfig | None = None  # None: the init model's stored setting, else ChatConfig()
    heldout: int = 32  # expert episodes on held-out tasks for the held-out NLL
    steps: int = 300
    batch_size: int = 16
    max_actions: int | None = None  # cap per episode (None: the environment's turn limit)
    workers: int = 2
    seed: int = 0
    run_dir: str | None = None
    checkpoint_every: int = 50
    eval_every: int = 100  # steps between held-out NLL and evaluation (0: only at the end)
    evaluation: EvalConfig = dataclasses.field(
        default_factory=lambda: EvalConfig(samples=0, max_new_tokens=24))
    init: str | None = None
    tiny: TinyModel = dataclasses.field(default_factory=lambda: TinyModel(
        vocab_size=1024, hidden_size=128, layers=4, heads=4, kv_heads=2, head_dim=32,
        intermediate_size=384, tokenizer_episodes=200))
    learner: LearnerConfig = dataclasses.field(default_factory=lambda: LearnerConfig(
        optimizer=OptimizerConfig(learning_rate=1e-3, warmup_steps=20), compute_dtype="float32"))
    # The learner's devices (`tpu.mesh`)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)

    def __post_init__(self):
        envs.check_name(self.env)
        if min(self.demonstrations, self.heldout, self.steps, self.batch_size, self.workers,
               self.checkpoint_every) < 1 or self.eval_every < 0:
            raise ValueError("demonstrations, heldout, steps, batch_size, workers and "
                             "checkpoint_every must be >= 1, eval_every >= 0")
        for name in ("noise", "repeats"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        check_warmup(self.steps, self.learner)


def demonstrating_env(config: SftConfig) -> envs.Env:
    """A new environment of ``config`` (`run_env`); ValueError when it has no expert to learn
    from."""
    env = run_env(config)
    if not env.has_expert:
        raise ValueError(f"{config.env} has no expert to learn from")
    return env


def main(argv: Sequence[str] | None = None) -> None:
    skip_absent_tpu()
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Settings apply in order: SftConfig's defaults, --config, the flags, --set.")
    add_arguments(parser, SHORTHANDS, "learner.optimizer.learning_rate=3e-4")
    args = parser.parse_args(argv)
    try:
        config = load_config(SftConfig, args.config, overrides(args, SHORTHANDS))
        if config.run_dir is not None:
            check_run_config(Path(config.run_dir), config)
        demonstrating_env(config)
        # JAX, the model and the environments' workers load here, for a config that is valid
        from prover_jax import sft_trainer, trainer

        cfg, params, tokenizer = trainer.initial_model(config)
        trainer.with_chat(config, tokenizer, "", log=lambda line: None)  # checked; sft logs
    except (ValueError, OSError) as e:
        parser.error(str(e))
    compile_cache.enable()
    with exit_when_interrupted():
        sft_trainer.sft(config, cfg, params, tokenizer)


SHORTHANDS = {"env": str, "steps": int, "demonstrations": int, "noise": float,
              "run_dir": str, "init": str, "eval_every": int}


if __name__ == "__main__":
    main()
