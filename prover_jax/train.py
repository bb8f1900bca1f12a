"""``python -m prover_jax.train``: train an agent with a credit method (`prover_jax.trainer`
runs the loop).

The run's settings are a `TrainConfig`: its defaults, then a YAML file (``--config``), the
shorthand flags and ``--set dotted.key=value`` overrides, checked before anything heavy loads
(this module, its configs and the credit registry import no JAX), so ``--help`` and a bad
setting answer at once. Without ``--init`` it trains a small default: a tiny random Qwen3 with a
byte-level BPE tokenizer trained on the environment's own texts (nothing is downloaded), on
household tasks. Pass ``--model FOLDER`` for a local Hugging Face checkpoint instead.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import envs
from prover_jax import compile_cache
from prover_jax.config import (
    add_arguments,
    build,
    flatten,
    overrides,
    to_dict,
    without_secrets,
)
from prover_jax.config import load as load_config
from prover_jax.credit import registry
from prover_jax.credit.hosts import HostOptions
from prover_jax.interrupt import Interrupted
from prover_jax.learner.config import LearnerConfig, OptimizerConfig
from prover_jax.platforms import skip_absent_tpu
from prover_jax.plot import read_metrics
from prover_jax.settings import ChatConfig, EvalConfig, SamplingConfig
from tpu.mesh_config import MeshConfig

CONFIG_FILE, METRICS, CHECKPOINTS = "config.json", "metrics", "checkpoints"
TASKS_FILE = "tasks.json"  # the environment's task source (`envs.Env.task_source`)
CHANGES_FILE = "config_changes.json"  # the settings each resume changed, with its step


@dataclasses.dataclass(frozen=True)
class TinyModel:
    """The random Qwen3, and the byte-level BPE trained on the environment's texts, that a run
    builds when it starts from no model (`tiny`)."""

    vocab_size: int = 512
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    tokenizer_episodes: int = 20  # expert episodes whose texts train the tokenizer
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A training run. ``credit`` is any registered method the trainer can run
    (`trainable_methods`), ``credit_config`` the fields of its config type that differ from
    the defaults (e.g. ``{"lam": 0.5}`` for prover, ``{"base": {"lam": 0.5}}`` for
    prover+vict, ``{"schedule": [[0, 8], [50, 10]]}`` for budget-matched-grpo), and ``host`` the
    settings its host side reads (judge, continuations, ...)."""

    env: str = "household"
    # the environment's keyword arguments (alfworld: {"data": FOLDER} of ALFWorld's games)
    env_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    split: str | None = None  # the tasks trained on (None: "train", else the env's first split)
    credit: str = "grpo"
    credit_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    host: HostOptions = dataclasses.field(default_factory=HostOptions)
    steps: int = 3
    groups: int = 2
    group_size: int = 4
    max_actions: int | None = 6  # cap per episode (None: the environment's turn limit)
    workers: int = 2
    seed: int = 0
    run_dir: str | None = None
    checkpoint_every: int = 10  # steps between checkpoints (the last step is always saved)
    init: str | None = None  # start from a run directory (e.g. an SFT run) or a model folder
    tiny: TinyModel = dataclasses.field(default_factory=TinyModel)  # the model without init
    eval_every: int = 0  # steps between held-out evaluations into metrics.jsonl (0: none)
    eval_at_start: bool = False  # one before the first step too (metrics.jsonl's step -1)
    evaluation: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    sampling: SamplingConfig = dataclasses.field(
        default_factory=lambda: SamplingConfig(max_new_tokens=16))
    # How episodes are written in the chat template (None: the init model's stored setting,
    # else ChatConfig's default); the run stores the one it used with its model.
    chat: ChatConfig | None = None
    learner: LearnerConfig = dataclasses.field(default_factory=lambda: LearnerConfig(
        optimizer=OptimizerConfig(learning_rate=1e-3), compute_dtype="float32"))
    # The learner's and sampler's devices (`tpu.mesh`)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)

    def __post_init__(self):
        envs.check_name(self.env)
        method = registry.get(self.credit)
        if not registry.trainable(method):
            raise ValueError(f"credit {self.credit!r} has no host side to produce its inputs "
                             f"{sorted(method.inputs)}; one of {trainable_methods()}")
        self.credit_settings()
        if min(self.steps, self.groups, self.group_size, self.workers,
               self.checkpoint_every) < 1 or self.eval_every < 0:
            raise ValueError("steps, groups, group_size, workers and checkpoint_every must be "
                             ">= 1, eval_every >= 0")
        check_warmup(self.steps, self.learner)
        s = self.sampling
        if (s.temperature, s.top_k, s.top_p) != (1.0, 0, 1.0):
            raise ValueError("the learner scores tokens under the model's plain softmax, so the "
                             "sampler must draw from it too (temperature 1, top_k 0, top_p 1) "
                             "for its log-probs to be the old policy's; got temperature="
                             f"{s.temperature}, top_k={s.top_k}, top_p={s.top_p}")

    def credit_settings(self):
        """The credit method's config: its config type built from ``credit_config``."""
        return build(registry.get(self.credit).config_type, self.credit_config, "credit_config.")


def trainable_methods() -> list[str]:
    """The registered credit methods the trainer can run (group rollouts, a host side for
    their inputs)."""
    return [name for name in registry.names() if registry.trainable(registry.get(name))]


def check_warmup(steps: int, learner: LearnerConfig) -> None:
    """Raises ValueError when the learning rate's warmup is not shorter than the run."""
    warmup = learner.optimizer.warmup_steps
    if warmup and warmup >= steps:
        raise ValueError(f"learner.optimizer.warmup_steps={warmup} is not shorter than the run "
                         f"(steps={steps}): the learning rate would never reach its peak; set "
                         "learner.optimizer.warmup_steps below steps")


# What a resumed run may change: the mesh too, so a run moves between machines.
# Settings a resume may change: they change neither the updates nor the random draws (an
# episode plays the same whichever worker runs it); a trailing "." covers a whole section.
RESUMABLE_CHANGES = ("steps", "run_dir", "mesh.data", "mesh.fsdp", "mesh.model",
                     "checkpoint_every", "eval_every", "eval_at_start", "evaluation.",
                     "workers")


def config_differences(directory: Path, config) -> dict[str, tuple[Any, Any]]:
    """Each dotted setting in which ``config`` (a `TrainConfig` or `SftConfig`) differs from
    the one the run directory was started with, as (stored, ours); empty when it holds none."""
    path = directory / CONFIG_FILE
    if not path.exists():
        return {}
    stored = with_chat_keys(flatten(json.loads(path.read_text())))
    ours = flatten(without_secrets(to_dict(config)))
    return {k: (stored.get(k), ours.get(k)) for k in sorted(set(stored) | set(ours))
            if stored.get(k) != ours.get(k)}


def changes_line(changes: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())


def check_run_config(directory: Path, config) -> None:
    """Raises a ValueError naming every setting in which ``config`` differs from the one the
    run directory was started with, but for those a resume may change (`RESUMABLE_CHANGES`)."""
    differing = {k: v for k, v in config_differences(directory, config).items()
                 if not resumable(k)}
    if differing:
        raise ValueError(f"{directory} holds a run with another config "
                         f"({changes_line(differing)}); nothing was changed: resume with the "
                         f"same settings (a resume may change only {', '.join(RESUMABLE_CHANGES)})"
                         " or use another run directory")


def record_config_changes(directory: Path, config, step: int) -> str | None:
    """Appends the settings a resume at `step` changes (`config_differences`, all resumable
    once `check_run_config` passed) to the run's `CHANGES_FILE`, as {"step": step, "changes":
    {key: [before, now]}}; returns them as one line, None when none changed."""
    changes = config_differences(directory, config)
    if not changes:
        return None
    path = directory / CHANGES_FILE
    recorded = json.loads(path.read_text()) if path.exists() else []
    recorded.append({"step": step, "changes": {k: list(v) for k, v in changes.items()}})
    path.write_text(json.dumps(recorded, indent=2) + "\n")
    return changes_line(changes)


def run_env(config) -> envs.Env:
    """A new environment of a run's config (`TrainConfig`, `SftConfig`): ``env`` made with its
    ``env_options``."""
    return envs.make(config.env, **config.env_options)


def check_run_tasks(directory: Path, source: Mapping[str, Any]) -> None:
    """Raises a ValueError when the run directory's tasks came from another source than
    ``source`` (`envs.Env.task_source`): ALFWorld's data found since, or gone, would change
    every task under the run. The environment, the kind of source and the tasks per split must
    match; folders may differ (a run moves between machines)."""
    path = directory / TASKS_FILE

    def identity(record: Mapping[str, Any]) -> tuple:
        return record["env"], record["tasks"], json.dumps(record["splits"], sort_keys=True)

    if path.exists() and identity(json.loads(path.read_text())) != identity(source):
        stored = envs.source_line(json.loads(path.read_text()))
        raise ValueError(f"{directory} holds a run of other tasks ({stored}) than this "
                         f"environment has now ({envs.source_line(source)}); nothing was "
                         "changed: resume where the same tasks are, or use another run "
                         "directory")


def write_run_tasks(directory: Path, source: Mapping[str, Any]) -> None:
    """Writes the run's task source (`TASKS_FILE`)."""
    (directory / TASKS_FILE).write_text(json.dumps(source, indent=2) + "\n")


def with_chat_keys(stored: dict) -> dict:
    """A stored flat config of a run started before the chat setting existed, as it reads now:
    SFT's ``reply`` is ``chat.reply``, and a run without either wrote text replies."""
    if any(key == "chat" or key.startswith("chat.") for key in stored):
        return stored
    return {**{k: v for k, v in stored.items() if k != "reply"},
            "chat.reply": stored.get("reply", "text")}


def resumable(key: str) -> bool:
    """Whether the dotted setting ``key`` may change when a run resumes."""
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE_CHANGES)


def write_run_config(directory: Path, config: TrainConfig) -> None:
    """Writes ``config`` as the run directory's resolved config, atomically, without its
    secrets (an API key in ``host.judge_config`` is written as `config.REDACTED`)."""
    path = directory / CONFIG_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(without_secrets(to_dict(config)), indent=2) + "\n")
    tmp.replace(path)


def most_credited(added: Sequence[Any]) -> tuple[int, float]:
    """How far some turns' credit departs from the flat outcome advantage, from what each source
    added to it (float arrays): the sources that act on them, then the sum of what they added in
    absolute value; the larger, the more credited."""
    return (sum(bool(np.any(value)) for value in added),
            float(sum(np.abs(value).sum() for value in added)))


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


@contextlib.contextmanager
def exit_when_interrupted() -> Iterator[None]:
    """Turns `Interrupted` into its one-line message and exit code."""
    try:
        yield
    except Interrupted as e:
        print(e, file=sys.stderr)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
