"""The supervised warm start's run (`sft`): expert demonstrations as rollout-identical token
streams, the learner's step on their reply tokens, held-out NLL and evaluation, in a run
directory; `prover_jax.sft` is its command line and says what it does, and
`prover_jax.run_settings.SftConfig` its settings.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

import envs
from envs.pool import EnvPool
from prover_jax.batch import pack_streams
from prover_jax.demonstrations import DemonstrationPolicy, demonstrations
from prover_jax.evaluation import evaluate_model
from prover_jax.interrupt import deferred_signals
from prover_jax.learner import Learner, TrainBatch
from prover_jax.rollout import Episode
from prover_jax.run_settings import SftConfig, demonstrating_env
from prover_jax.settings import eval_split
from prover_jax.trainer import (
    Laps,
    RunDirectory,
    run_or_temporary,
    task_at,
    task_split,
    with_chat,
)
from tpu.mesh import batch_shards, build_mesh, to_sampler


def sft_batch(episodes: Sequence[Episode], pad_token_id: int, max_len: int,
              row_multiple: int = 1, turns: Sequence[Sequence[int]] | None = None):
    """The episodes' streams packed one a row: ``(Batch, dropped bool [B, L], trained bool
    [B, L])``, trained the tokens of the turns the loss covers (``turns[i]`` of episode i; by
    default every expert action's, `expert_turns`), dropped the other actions' tokens."""
    batch, _ = pack_streams([[e.stream()] for e in episodes], [[1.0] for _ in episodes],
                            pad_token_id=pad_token_id, max_len=max_len,
                            row_multiple=row_multiple)
    turn_ids, loss_mask = np.asarray(batch.turn_ids), np.asarray(batch.loss_mask)
    turns = [expert_turns(e) for e in episodes] if turns is None else turns
    dropped = np.zeros_like(loss_mask)
    for row, covered in enumerate(turns):
        dropped[row] = loss_mask[row] & ~np.isin(turn_ids[row], covered)
    trained = loss_mask & ~dropped
    trained[:, 0] = False  # nothing predicts the first token
    return batch, dropped, trained


def expert_turns(episode: Episode) -> list[int]:
    """The turns of `episode` whose action is the expert's (not a random one or a repeat)."""
    return [t for t, a in enumerate(episode.actions) if a.expert]


def choice_turns(env: envs.Env, episode: Episode) -> list[int]:
    """The expert's turns at the environment's choice states (`Env.oracle_choice`)."""
    return [t for t in expert_turns(episode) if env.oracle_choice(episode.states[t]) is not None]


def nll(logprobs: jax.Array, trained: np.ndarray) -> tuple[float, int]:
    """(mean negative log-likelihood of the trained tokens, their count)."""
    count = int(trained.sum())
    total = float(-jnp.sum(jnp.where(trained, logprobs, 0.0)))
    return total / max(count, 1), count


def heldout_nll(learner: Learner, params, episodes: Sequence[Episode], pad_token_id: int,
                max_len: int, batch_size: int) -> float:
    """The NLL of every expert token of `episodes`, in batches."""
    total = count = 0.0
    for first in range(0, len(episodes), batch_size):
        batch, _, trained = sft_batch(episodes[first:first + batch_size], pad_token_id, max_len)
        mean, n = nll(learner.logprobs(params, batch.tokens), trained)
        total, count = total + mean * n, count + n
    return total / max(count, 1)


def sft(config: SftConfig, cfg, params, tokenizer, log=tqdm.tqdm.write) -> list[dict]:
    """Runs ``config.steps`` steps in ``config.run_dir`` (resuming from its last checkpoint);
    returns the metrics of the steps it ran. Without a run directory, a temporary one is used
    and removed at the end.

    Raises:
      ValueError: as `prover_jax.trainer.train`, for the run directory and the environment.
    """
    env = demonstrating_env(config)
    config = with_chat(config, tokenizer, env.instruction(), log)
    with run_or_temporary(config.run_dir, "sft-", log) as directory:
        return _sft(config, env, cfg, params, tokenizer, directory, log)


def _sft(config: SftConfig, env: envs.Env, cfg, params, tokenizer, directory: Path,
         log) -> list[dict]:
    if jax.process_count() > 1:
        raise ValueError("SFT runs in one process (its demonstrations are not split over "
                         "processes yet); train the warm start on one host, then --init from it")
    learner = Learner(cfg, config.learner, build_mesh(config.mesh))
    row_multiple = config.learner.micro_batches * batch_shards(learner.mesh)
    run_dir = RunDirectory(directory, config, env.task_source(), learner, cfg, params, tokenizer,
                           log, "sft")
    state = run_dir.state
    policy = DemonstrationPolicy(tokenizer, env.instruction(), config.chat, config.noise,
                                 config.repeats)
    expert = DemonstrationPolicy(tokenizer, env.instruction(), config.chat)
    pad = policy.format.end_of_turn if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    max_len = cfg.max_position_embeddings
    train_tasks = env.tasks(task_split(env, config.split))
    heldout_tasks = env.tasks(eval_split(env, config.evaluation.split))
    slots = min(64, config.demonstrations)
    with (EnvPool(config.env, slots, config.workers, config=dict(config.env_options)) as pool,
          deferred_signals() as received):
        rng = random.Random(config.seed)
        chosen = [task_at(train_tasks, i, config.seed) for i in range(config.demonstrations)]
        demos = demonstrations(pool, policy, chosen, rng, config.max_actions)
        heldout = demonstrations(pool, expert, heldout_tasks[: config.heldout], rng,
                                 config.max_actions)
        log(f"{len(demos)} demonstrations ({np.mean([e.reward for e in demos]):.0%} solved, "
            f"{np.mean([e.num_turns for e in demos]):.1f} actions), {len(heldout)} held out")
        while int(state.step) < config.steps:
            step, laps = int(state.step), Laps()
            position = int(state.data_position)
            episodes = [task_at(demos, position + i, config.seed)
                        for i in range(config.batch_size)]
            turns = ([choice_turns(env, e) for e in episodes]
                     if config.train_on == "choices" else None)
            batch, dropped, trained = sft_batch(episodes, pad, max_len, row_multiple, turns)
            old = learner.logprobs(state.params, batch.tokens)
            loss, tokens = nll(old, trained)
            state, metrics = learner.train_step(state, TrainBatch(
                batch, jnp.asarray(trained, jnp.float32), old, dropped=dropped))
            state = dataclasses.replace(state, data_position=jax.device_put(
                np.int32(position + config.batch_size), state.data_position.sharding))
            metrics = jax.device_get(metrics)
            laps.lap("learner")
            last = step + 1 == config.steps
            run_dir.checkpoint(state, config.checkpoint_every)
            laps.lap("checkpoint")
            row = {"step": step, "sft/nll": loss, "sft/tokens": float(tokens),
                   **{f"learner/{k}": float(metrics[k]) for k in ("grad_norm", "lr", "entropy")}}
            if (config.eval_every and (step + 1) % config.eval_every == 0) or last:
                row["sft/heldout_nll"] = heldout_nll(learner, state.params, heldout, pad,
                                                     max_len, config.batch_size)
                settings = dataclasses.replace(config.evaluation,
                                               max_actions=config.max_actions)
                results = evaluate_model(pool, to_sampler(state.params, cfg, learner.mesh), cfg,
                                         tokenizer, settings, heldout_tasks[: settings.tasks])
                row.update({f"eval/{mode}/{k}": v for mode, metrics in results.items()
                            for k, v in metrics.items()})
                laps.lap("eval")
            row.update({f"time/{k}_s": v for k, v in laps.seconds.items()})
            run_dir.write(row, nll=f"{loss:.3f}")
            run_dir.stop_if_signalled(state, received(), config.run_dir)
    return run_dir.close()
