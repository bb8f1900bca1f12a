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

The episodes are written in the chat template as the model was trained to (its stored chat
setting, `prover_jax.runs.stored_chat`); ``--set chat.KEY=VALUE`` changes that (e.g.
``--set chat.template.enable_thinking=false``), with a warning.

``--expert`` runs the environment's expert instead (a ceiling), ``--random`` a policy of random
admissible actions (a floor). The result is JSON (``--out``) and a markdown table. The trainer
runs the same evaluation every ``eval_every`` steps into its ``metrics.jsonl``.

This module reads and checks the command line without loading JAX, the model or the
environments' workers; `prover_jax.evaluation` runs the episodes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import envs
from envs.pool import EnvPool
from prover_jax import compile_cache, runs
from prover_jax.config import add_dry_run, dry_run_lines
from prover_jax.platforms import skip_absent_tpu
from prover_jax.settings import EvalConfig, chat_with, eval_slots, eval_split


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
    skip_absent_tpu()
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
    parser.add_argument("--decode-chunk", type=int, default=0,
                        help="decode continuously, this many tokens per call, rows taking "
                        "their next turn between calls (0: every reply of a turn in one call)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    baseline = parser.add_mutually_exclusive_group()
    baseline.add_argument("--expert", action="store_true", help="the expert: a ceiling")
    baseline.add_argument("--random", action="store_true", help="random actions: a floor")
    parser.add_argument("--set", action="append", default=[], metavar="chat.KEY=VALUE",
                        help="a chat setting, e.g. chat.template.enable_thinking=false "
                        "(default: the model's stored one)")
    parser.add_argument("--out", help="write the results here as JSON")
    add_dry_run(parser)
    args = parser.parse_args(argv)
    try:
        if (args.model is not None) == (args.expert or args.random):
            raise ValueError("give a model (a run directory or model folder) or --expert or "
                             "--random")
        name, warning = chosen_env(args.model, args.env)
        if warning:
            print(warning, file=sys.stderr)
        if args.dry_run:
            envs.check_name(name)
            chat_with(args.set, None)
            unknown = args.env is None and args.model and not Path(args.model).exists()
            where = "the environment the model was trained on" if unknown else name
            print("\n".join([*dry_run_lines(None, [args.model]),
                             (f"  evaluates on {where}: {args.tasks} tasks, greedy and "
                              f"{args.samples} sampled episodes each")]))
            return
        env = envs.make(name)
        print(f"tasks of {envs.source_line(env.task_source())}", file=sys.stderr)
        if args.expert and not env.has_expert:
            raise ValueError(f"{name} has no expert")
        config = EvalConfig(eval_split(env, args.split), args.tasks, args.samples,
                            max_actions=args.max_actions, max_new_tokens=args.max_new_tokens,
                            seed=args.seed, decode_chunk=args.decode_chunk)
        chat = None
        if args.model is not None:
            stored = runs.stored_chat(args.model)
            chat, warning = runs.chat_for(chat_with(args.set, stored), stored, args.model)
            if warning:
                print(warning, file=sys.stderr)
        elif args.set:
            raise ValueError("--set chat.* applies to a model, not to --expert or --random")
        model = None if args.model is None else runs.load(args.model)
        if model is not None:
            from models.qwen.chat import AgentFormat

            AgentFormat(model[2], env.instruction(), chat.reply, chat.template)
    except (ValueError, OSError) as e:
        parser.error(str(e))
    from prover_jax import evaluation
    from prover_jax.rollout import ScriptedPolicy

    tasks = env.tasks(config.split)[: config.tasks]
    with EnvPool(name, eval_slots(len(tasks), config.samples), args.workers) as pool:
        if model is None:
            policy = ScriptedPolicy(0.0 if args.expert else 1.0)
            mode = "expert" if args.expert else "random"
            results = {mode: evaluation.evaluate(pool, policy, tasks, max(config.samples, 1),
                                      random.Random(config.seed), config.max_actions)}
        else:
            compile_cache.enable()
            cfg, params, tokenizer = model
            results = evaluation.evaluate_model(pool, params, cfg, tokenizer, config, tasks,
                                                chat)
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
