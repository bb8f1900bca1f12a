"""Held-out evaluation: ``python -m prover_jax.evaluate RUN_DIR_OR_MODEL``.

Runs held-out tasks (the ``eval`` split, or ``test`` where that is the only one) through the
environment pool, every task at once, with greedy decoding (one episode per task) and sampled
decoding (``samples`` episodes per task, at temperature 1), and reports each environment's own
metrics next to the common ones:

- every environment: ``success`` (reward >= 1), ``reward``, ``actions``, ``valid_actions``, and
  with several samples ``pass^k`` (tau-bench's: the chance that k samples of a task all
  succeed, ``C(c, k) / C(n, k)`` for c successes in n, averaged over tasks);
- household: ``success/<type>`` per task type (pick, look, clean, heat, cool, pick2);
- webshop: ``score`` (the mean purchase reward) and ``strict_success`` (reward exactly 1);
- searchqa: ``exact_match``.

``--expert`` runs the environment's expert instead (a ceiling), ``--random`` a policy of random
admissible actions (a floor). The result is JSON (``--out``) and a markdown table. The trainer
runs the same evaluation every ``eval_every`` steps into its ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import envs
from envs.pool import EnvPool
from prover_jax import compile_cache, runs
from prover_jax.model_policy import ModelPolicy, SamplingConfig
from prover_jax.rollout import Episode, Policy, ScriptedPolicy, run, start


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What an evaluation runs.

    Attributes:
      split: the held-out tasks (None: `eval_split`).
      tasks: how many of them, in order (None: all).
      samples: sampled episodes per task (pass^k up to k = samples); 0 skips sampling.
      greedy: also run one greedy episode per task.
      max_actions: cap per episode (None: the environment's turn limit).
      max_new_tokens: per reply (None: 32, or the training run's).
      seed: the sampled episodes' randomness.
    """

    split: str | None = None
    tasks: int | None = 50
    samples: int = 1
    greedy: bool = True
    max_actions: int | None = None
    max_new_tokens: int | None = None
    seed: int = 0

    def __post_init__(self):
        if self.samples < 0 or (self.tasks is not None and self.tasks < 1):
            raise ValueError(f"need samples >= 0 and tasks >= 1, got {self.samples}, "
                             f"{self.tasks}")
        if not self.greedy and not self.samples:
            raise ValueError("nothing to run: greedy is off and samples is 0")


def eval_split(env: envs.Env, split: str | None = None) -> str:
    """`split` checked against the environment's, or its held-out one: "eval", else
    "test", else its last split."""
    if split is not None:
        if split not in env.splits:
            raise ValueError(f"{env.name} has no split {split!r}; its splits: {env.splits}")
        return split
    return next((s for s in ("eval", "test") if s in env.splits), env.splits[-1])


def pass_at_k(successes: Sequence[int], samples: int, k: int) -> float:
    """tau-bench's pass^k over tasks: the mean of C(c, k) / C(n, k)."""
    return float(np.mean([math.comb(c, k) / math.comb(samples, k) for c in successes]))


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
                   tasks: Sequence[envs.Task]) -> dict[str, dict[str, float]]:
    """{"greedy": metrics, "sampled": metrics} of a model on `tasks` (as `config` says)."""
    system = envs.make(tasks[0].env).instruction()
    modes = {"greedy": (0.0, 1)} if config.greedy else {}
    if config.samples:
        modes["sampled"] = (1.0, config.samples)
    results = {}
    for mode, (temperature, samples) in modes.items():
        sampling = SamplingConfig(max_new_tokens=config.max_new_tokens or 32,
                                  temperature=temperature)
        policy = ModelPolicy(params, cfg, tokenizer, system, sampling)
        results[mode] = evaluate(pool, policy, tasks, samples, random.Random(config.seed),
                                 config.max_actions)
    return results


def markdown(results: dict[str, dict[str, float]]) -> str:
    """A table: one row per metric, one column per mode."""
    modes = list(results)
    metrics = list(dict.fromkeys(k for r in results.values() for k in r))
    lines = ["| metric | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for metric in metrics:
        cells = [f"{results[m][metric]:.3f}" if metric in results[m] else "" for m in modes]
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="a run directory or a Hugging Face model folder")
    parser.add_argument("--env", help="the environment (default: the one the model was "
                        "trained on, else household)")
    parser.add_argument("--split")
    parser.add_argument("--tasks", type=int, default=EvalConfig.tasks)
    parser.add_argument("--samples", type=int, default=EvalConfig.samples,
                        help="sampled episodes per task (pass^k up to this k)")
    parser.add_argument("--max-actions", type=int)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    baseline = parser.add_mutually_exclusive_group()
    baseline.add_argument("--expert", action="store_true", help="the expert: a ceiling")
    baseline.add_argument("--random", action="store_true", help="random actions: a floor")
    parser.add_argument("--out", help="write the results here as JSON")
    args = parser.parse_args(argv)
    try:
        if (args.model is not None) == (args.expert or args.random):
            raise ValueError("give a model (a run directory or model folder) or --expert or "
                             "--random")
        name, warning = chosen_env(args.model, args.env)
        if warning:
            print(warning, file=sys.stderr)
        env = envs.make(name)
        if args.expert and not env.has_expert:
            raise ValueError(f"{name} has no expert")
        config = EvalConfig(eval_split(env, args.split), args.tasks, args.samples,
                            max_actions=args.max_actions, max_new_tokens=args.max_new_tokens,
                            seed=args.seed)
        model = None if args.model is None else runs.load(args.model)
    except (ValueError, OSError) as e:
        parser.error(str(e))
    tasks = env.tasks(config.split)[: config.tasks]
    with EnvPool(name, min(len(tasks) * max(config.samples, 1), 64), args.workers) as pool:
        if model is None:
            policy = ScriptedPolicy(0.0 if args.expert else 1.0)
            mode = "expert" if args.expert else "random"
            results = {mode: evaluate(pool, policy, tasks, max(config.samples, 1),
                                      random.Random(config.seed), config.max_actions)}
        else:
            compile_cache.enable()
            cfg, params, tokenizer = model
            results = evaluate_model(pool, params, cfg, tokenizer, config, tasks)
    report = {"env": name, "split": config.split, "tasks": len(tasks),
              "model": args.model, "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"{name} {config.split}, {len(tasks)} tasks" + (f": {args.model}" if args.model else ""))
    print(markdown(results))


def chosen_env(model: str | None, env: str | None) -> tuple[str, str | None]:
    """(the environment to evaluate `model` on, a warning or None): `env` when given (a warning
    when the model was trained on another), else the one it was trained on, else household."""
    trained = None if model is None else runs.trained_env(model)
    name = env or trained or "household"
    if trained and name != trained:
        return name, f"warning: evaluating on {name}; {model} was trained on {trained}"
    return name, None


if __name__ == "__main__":
    main()
