"""Every credit method side by side on real rollouts: ``python -m prover_jax.credit_report``.

Rolls out groups of one environment with its scripted expert (a share ``epsilon`` of its
actions replaced by random ones, so groups mix successes and failures), runs each method's
registered host side on them (ProVer's judge and continuations, GiGPO's anchors, SPO's boundary
values, VICT's trace and cores) and prints every turn's advantage under every method.

Per-turn advantages depend on the batch's turn structure, rewards and groups only, so the batch
here carries one stand-in token per message instead of a model's token streams. CriticSearch
needs an LLM critic: it is included when ``PROVER_JUDGE_BASE_URL`` is set; the dense oracle
credit only on an environment with a progress oracle (household-pivot).
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence

import numpy as np

import envs
from envs.pool import EnvPool
from prover_jax import credit
from prover_jax.batch import Batch, Message, Trajectory, pack
from prover_jax.credit.hosts import HostContext, HostOptions
from prover_jax.platforms import skip_absent_tpu
from prover_jax.rollout import Episode, ScriptedPolicy, run, start
from prover_jax.run_settings import trainable_methods
from prover_jax.trainer import task_split

NEEDS_AN_LLM = ("criticsearch",)
NEEDS_AN_ORACLE = {"oracle-progress": "progress"}  # method -> the `Env.oracles` entry it reads


def default_methods(env: envs.Env) -> list[str]:
    """The trainer's methods on plain groups of `env`, those needing an LLM only when one is
    configured and those reading an oracle only where `env` has it (spo-tree grows its own
    trees; budget-matched GRPO is GRPO on its groups)."""
    have_llm = bool(os.environ.get("PROVER_JUDGE_BASE_URL"))
    names = [m for m in trainable_methods() if credit.get(m).rollouts == "groups"
             and (have_llm or not any(m.startswith(n) for n in NEEDS_AN_LLM))
             and all(NEEDS_AN_ORACLE.get(part, "") in {"", *env.oracles}
                     for part in m.split("+"))]
    return sorted(names, key=lambda n: ("+" in n, n))  # the compositions last


def turn_structure(episode: Episode) -> Trajectory:
    """A stand-in conversation with the episode's turns and reward (one token a message)."""
    messages = [Message([1], "user")]
    for turn in range(episode.num_turns):
        messages += [Message([2], "assistant", turn), Message([3], "tool")]
    return Trajectory(messages, episode.reward)


def advantages(ctx: HostContext, batch: Batch, methods: Sequence[str],
               options: HostOptions) -> dict[str, np.ndarray]:
    """{method: float32 [B, T] per-turn advantages} through each method's host side."""
    out = {}
    for name in methods:
        method = credit.get(name)
        settings = method.config_type()
        inputs = {} if method.host is None else method.host(options, settings)(ctx).inputs
        out[name] = np.asarray(credit.compute(name, batch, inputs, settings).per_turn)
    return out


def report(ctx: HostContext, table: dict[str, np.ndarray], width: int = 10) -> str:
    """The per-turn table, one block per episode."""
    names = list(table)
    lines = []
    header = "turn  action" + " " * 26 + "".join(f"{n:>{max(width, len(n) + 1)}}"
                                                 for n in names)
    for row, g, member, episode in ctx.rows():
        title = (f"group {g}  member {member}  row {row}  R={episode.reward:g}  "
                 f"({episode.num_turns} turns)")
        lines += ["", title, header]
        for turn, action in enumerate(episode.actions):
            cells = "".join(f"{table[n][row, turn]:>+{max(width, len(n) + 1)}.3f}"
                            for n in names)
            lines.append(f"{turn:>4}  {action.text[:32]:<32}{cells}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    skip_absent_tpu()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="household")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--epsilon", type=float, default=0.5,
                        help="share of the expert's actions replaced by random ones")
    parser.add_argument("--max-actions", type=int, default=10)
    parser.add_argument("--continuations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--methods", nargs="+", help="registry names (default: all the trainer "
                        "runs, CriticSearch only with an LLM endpoint)")
    args = parser.parse_args(argv)
    try:
        env = envs.make(args.env)
        methods = args.methods or default_methods(env)
        for name in methods:
            if credit.get(name).rollouts != "groups":
                raise ValueError(f"{name} needs its own {credit.get(name).rollouts} rollouts; "
                                 "the report compares methods on the same groups")
        policy = ScriptedPolicy(args.epsilon)
    except ValueError as e:
        parser.error(str(e))
    rng = random.Random(args.seed)
    tasks = env.tasks(task_split(env, None))[: args.groups]
    with EnvPool(args.env, args.groups * args.group_size, num_workers=1) as pool:
        episodes = run(pool, policy, [start(t) for t in tasks for _ in range(args.group_size)],
                       rng, args.max_actions)
        groups = [episodes[g * args.group_size:(g + 1) * args.group_size]
                  for g in range(len(tasks))]
        batch = pack([[turn_structure(e) for e in group] for group in groups])
        ctx = HostContext(env, groups, pool, policy, rng, *batch.turn_valid.shape)
        table = advantages(ctx, batch, methods, HostOptions(continuations=args.continuations))
    print(f"{args.env}: {len(tasks)} groups of {args.group_size}, the expert with "
          f"{args.epsilon:.0%} random actions; per-turn advantage of each credit method")
    print(report(ctx, table))


if __name__ == "__main__":
    main()
