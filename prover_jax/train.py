"""``python -m prover_jax.train``: train an agent with a credit method (`prover_jax.trainer`
runs the loop).

The run's settings are a `prover_jax.run_settings.TrainConfig`: its defaults, then a YAML file
(``--config``), the shorthand flags and ``--set dotted.key=value`` overrides, checked before
anything heavy loads (this module, its settings and the credit registry import no JAX), so
``--help`` and a bad setting answer at once. Without ``--init`` it trains a small default: a
tiny random Qwen3 with a byte-level BPE tokenizer trained on the environment's own texts
(nothing is downloaded), on household tasks. Pass ``--model FOLDER`` for a local Hugging Face
checkpoint instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import envs
from prover_jax import compile_cache
from prover_jax.config import add_arguments, dry_run_lines, overrides
from prover_jax.config import load as load_config
from prover_jax.interrupt import exit_when_interrupted
from prover_jax.platforms import skip_absent_tpu
from prover_jax.plot import read_metrics
from prover_jax.run_files import check_run_config, most_credited
from prover_jax.run_settings import TrainConfig, trainable_methods


def shown(action: str, width: int) -> str:
    """An action's text for one cell of a table: characters that would break the line (tabs,
    newlines, other controls) escaped, cut to `width`."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in action)
    return text[:width]


def credit_lines(directory: Path, width: int = 36) -> list[str]:
    """The most credited sampled group of ``samples.jsonl`` (`most_credited`, then the most
    outcome advantage; the earliest of equals; with several processes a step samples a group on
    each): its episodes action by action, with the credit each source that gave any gave them
    ("!" marks an action the environment rejected). One line when no sampled group got any
    credit; none without samples."""
    path = directory / "samples.jsonl"
    records = ([json.loads(line) for line in path.read_text().splitlines() if line.strip()]
               if path.exists() else [])
    if not records:
        return []
    sampled = sorted({(r["step"], r["group"]) for r in records})

    def credited(key: tuple[int, int]) -> tuple[int, float, float]:
        actions = [a["parts"] for r in records if (r["step"], r["group"]) == key
                   for a in r["actions"]]
        sources = dict.fromkeys(name for parts in actions for name in parts if name != "outcome")
        return (*most_credited([[parts.get(name, 0.0) for parts in actions]
                                for name in sources]),
                sum(abs(parts.get("outcome", 0.0)) for parts in actions))

    step, group = max(sampled, key=lambda key: (credited(key), -key[0], -key[1]))
    if credited((step, group)) == (0, 0.0, 0.0):
        return [("credit: none in any sampled group (in each, every episode had the same reward, "
                "so GRPO's advantage is 0, and the method added nothing)")]
    chosen = [r for r in records if (r["step"], r["group"]) == (step, group)]
    names = list(chosen[0]["actions"][0]["parts"]) if chosen[0]["actions"] else ["outcome"]
    added = [n for n in names if n != "outcome"
             and any(a["parts"][n] for r in chosen for a in r["actions"])]
    names = ["outcome", *added]
    lines = [f"credit at step {step + 1}, group {group} ({chosen[0]['task']}): "
             "outcome is the flat advantage GRPO gives every action"
             + (", " + ", ".join(added) + " what the method added" if added else "")]
    header = f"  {'turn':>4}  {'action':<{width}}" + "".join(f"{n:>9}" for n in
                                                           [*names, "total"])
    for record in chosen:
        lines += [f" episode {record['member']} (reward {record['reward']:g})", header]
        lines += [f"  {t:>4}{' !' if not a.get('valid', True) else '  '}"
                  f"{shown(a['action'], width):<{width}}"
                  + "".join(f"{a['parts'][n]:>+9.3f}" for n in names) + f"{a['credit']:>+9.3f}"
                  for t, a in enumerate(record["actions"])]
    if any(not a.get("valid", True) for r in chosen for a in r["actions"]):
        lines.append(" (! the environment rejected the action)")
    return lines


SHORTHANDS = {"env": str, "split": str, "credit": str, "steps": int, "groups": int,
              "group_size": int, "run_dir": str, "checkpoint_every": int, "init": str}


def argument_parser() -> argparse.ArgumentParser:
    """The trainer's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m prover_jax.train", description=__doc__.splitlines()[0],
        epilog="Settings apply in order: TrainConfig's defaults, --config, the shorthand flags, "
               "--set. Credit methods: " + ", ".join(trainable_methods())
               + ". Environments: " + ", ".join(envs.names()) + ".")
    add_arguments(parser, SHORTHANDS, "learner.optimizer.learning_rate=1e-6")
    parser.add_argument("--model", dest="init", metavar="PATH", help="the same as --init")
    parser.add_argument("--judge", help="ProVer's judge: contrastive, random, agentic, ...")
    parser.add_argument("--judge-model", metavar="FOLDER",
                        help="a local model the run serves for the agentic judge and critic")
    parser.add_argument("--match-budget", metavar="RUN_DIR",
                        help="budget-matched-grpo: group sizes that spend what the ProVer run "
                             "in RUN_DIR spent on verification, phase by phase of 10 steps")
    return parser


def config_changes(args: argparse.Namespace) -> list[str]:
    """The dotted overrides of the config that parsed `argument_parser` flags make, in the
    order they apply: the shorthands, the judge's flags, then each ``--set``."""
    changes = overrides(args, SHORTHANDS)
    judge_flags = [f"host.{name}={value}" for name, value in (("judge", args.judge),
                                                             ("judge_model", args.judge_model))
                   if value is not None]
    changes[len(changes) - len(args.set):len(changes) - len(args.set)] = judge_flags
    return changes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser()
    skip_absent_tpu()
    args = parser.parse_args(argv)
    changes = config_changes(args)
    try:
        config = load_config(TrainConfig, args.config, changes)
        if config.run_dir is not None:
            check_run_config(Path(config.run_dir), config)
        if args.dry_run:
            print("\n".join(dry_run_lines(config, [config.init, args.judge_model,
                                                    args.match_budget])))
            return
        # JAX, the model and the environments load here, for a config that is valid
        from prover_jax import trainer
        from tpu import distributed

        if args.match_budget:
            if config.credit != "budget-matched-grpo":
                raise ValueError("--match-budget sets budget-matched-grpo's schedule; pass "
                                 "--credit budget-matched-grpo")
            from prover_jax.spo_rollouts import budget_schedule_of_run

            schedule = budget_schedule_of_run(args.match_budget, config.group_size)
            config = load_config(TrainConfig, args.config, [
                *changes, f"credit_config.schedule={json.dumps(schedule)}"])
        cfg, params, tokenizer = trainer.initial_model(config)
        if config.architecture is not None:
            from tpu.plan import check_architecture

            check_architecture(cfg, config.architecture)
        trainer.with_chat(config, tokenizer, "", log=lambda line: None)  # checked; train logs
    except (ValueError, OSError) as e:
        parser.error(str(e))
    compile_cache.enable()
    with exit_when_interrupted():
        trainer.train(config, cfg, params, tokenizer)
    if config.run_dir is not None and distributed.is_main():
        print("\n".join(closing_lines(Path(config.run_dir))))


def closing_lines(directory: Path) -> list[str]:
    """What a finished run tells its user: the held-out success it measured before training
    and last, one sampled group's credit (`credit_lines`), where its files are, and how to
    train it further."""
    metric = "eval/greedy/success"
    measured = [(row["step"], row[metric]) for row in read_metrics(directory) if metric in row]
    said = [f"{value:.3f} before training" if step < 0 else f"{value:.3f} after step {step + 1}"
            for step, value in dict.fromkeys([*measured[:1], *measured[-1:]])]
    lines = [f"held-out greedy success: {', '.join(said)}"] if said else []
    lines += credit_lines(directory)
    files = [name for name in ("metrics.jsonl", "samples.jsonl", "prover_proposals.jsonl",
                               "vict_proofs.jsonl") if (directory / name).exists()]
    plots = sorted(p.name for p in (directory / "plots").glob("*.png"))
    lines.append(f"run directory: {directory} ({', '.join(files)}; model/ for evaluate and "
                 "serve)")
    if plots:
        lines.append(f"plots: {directory / 'plots'} ({', '.join(plots)})")
    lines.append("more steps: the same command with a larger --steps (it resumes from the last "
                 "checkpoint)")
    return lines


if __name__ == "__main__":
    main()
