"""Held-out episodes and their metrics: a policy's (`evaluate`) or a model's, greedy and sampled
(`evaluate_model`), summarized per environment (`summarize`); the metrics are listed in
`prover_jax.evaluate`, its command line.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

import envs
from envs.pool import EnvPool
from prover_jax.model_policy import ModelPolicy
from prover_jax.rollout import Episode, Policy, run, start
from prover_jax.settings import ChatConfig, EvalConfig, SamplingConfig, pass_at_k


def summarize(groups: Sequence[Sequence[Episode]]) -> dict[str, float]:
    """The metrics of one decoding mode from its episodes, grouped by task (one environment)."""
    episodes = [e for group in groups for e in group]
    env_name = episodes[0].task.env
    won = [e.reward >= 1.0 for e in episodes]
    out = {
        "episodes": float(len(episodes)),
        "success": float(np.mean(won)),
        "reward": float(np.mean([e.reward for e in episodes])),
        "actions": float(np.mean([e.num_turns for e in episodes])),
        "valid_actions": float(np.mean([v for e in episodes for v in e.valid] or [0.0])),
    }
    samples = len(groups[0])
    if samples > 1:
        successes = [sum(e.reward >= 1.0 for e in group) for group in groups]
        out.update({f"pass^{k}": pass_at_k(successes, samples, k)
                    for k in range(1, samples + 1)})
    if env_name.startswith("household"):
        from envs.household.env import world_of
        from envs.household.world import TASK_TYPES

        kinds = [world_of(e.task).task_type for e in episodes]
        for kind in TASK_TYPES:
            hits = [w for w, k in zip(won, kinds) if k == kind]
            if hits:
                out[f"success/{kind}"] = float(np.mean(hits))
    elif env_name == "webshop":
        out["score"] = out["reward"]
        out["strict_success"] = float(np.mean([e.reward == 1.0 for e in episodes]))
    elif env_name == "searchqa":
        out["exact_match"] = out["reward"]
    return out


def evaluate(pool: EnvPool, policy: Policy, tasks: Sequence[envs.Task], samples: int,
             rng: random.Random, max_actions: int | None = None) -> dict[str, float]:
    """Runs `samples` episodes of every task at once; their metrics (`summarize`)."""
    episodes = run(pool, policy, [start(t) for t in tasks for _ in range(samples)], rng,
                   max_actions, progress="evaluate")
    groups = [episodes[i * samples:(i + 1) * samples] for i in range(len(tasks))]
    return summarize(groups)


def evaluate_model(pool: EnvPool, params, cfg, tokenizer, config: EvalConfig,
                   tasks: Sequence[envs.Task], chat: ChatConfig | None = None
                   ) -> dict[str, dict[str, float]]:
    """{"greedy": metrics, "sampled": metrics} of a model on `tasks` (as `config` says), its
    episodes written in the chat template as `chat` says."""
    system = envs.make(tasks[0].env).instruction()
    modes = {"greedy": (0.0, 1)} if config.greedy else {}
    if config.samples:
        modes["sampled"] = (1.0, config.samples)
    results = {}
    for mode, (temperature, samples) in modes.items():
        sampling = SamplingConfig(max_new_tokens=config.max_new_tokens or 32,
                                  temperature=temperature, decode_chunk=config.decode_chunk or 0)
        policy = ModelPolicy(params, cfg, tokenizer, system, sampling, chat)
        results[mode] = evaluate(pool, policy, tasks, samples, random.Random(config.seed),
                                 config.max_actions)
    return results
