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

This module reads and checks the settings (`prover_jax.run_settings.SftConfig`) without loading
JAX; `prover_jax.sft_trainer` runs the warm start.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from prover_jax import compile_cache
from prover_jax.config import add_arguments, dry_run_lines, overrides
from prover_jax.config import load as load_config
from prover_jax.interrupt import exit_when_interrupted
from prover_jax.platforms import skip_absent_tpu
from prover_jax.run_files import check_run_config
from prover_jax.run_settings import SftConfig, demonstrating_env


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
        if args.dry_run:
            print("\n".join(dry_run_lines(config, [config.init])))
            return
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
