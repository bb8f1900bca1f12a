"""Where each credit method puts credit, on tasks with a known pivotal decision:
``python experiments/credit_placement.py``.

The tasks are household-small pick / clean / heat / cool tasks whose goal object starts in a
closed receptacle, so the pivotal decision is finding it there: the turn that takes it
(``take <goal object> from <receptacle>``) writes the verifier's ``acquired`` atom. Groups of 8
episodes are played by the expert with a share ``epsilon`` of its actions replaced by random
admissible ones and then a share ``repeats`` by the episode's previous action again (which the
environment mostly rejects, the mistake a trained tiny agent makes most), each action flagged
expert or random, so every group mixes successes and failures and every trajectory mixes the
actions that made its outcome with detours. Every method runs its registered host side on the
same groups:

- ProVer (contrastive judge; random judge, the paper's control): acceptance rate (Δ > 0), mean
  Δ, and the share of accepted segments that contain the pivotal turn.
- VICT: of the positive correction mass (A_vict - A_grpo) on successful trajectories, the share
  on expert turns and on random detours; on failures, the share of harmful actions (a random
  ``put`` of a goal object anywhere but a target, accepted by the environment) that get a
  negative correction, and the share of the negative mass on rejected actions; and the same
  with every action taken as accepted (the rule before witnesses needed the environment's
  acceptance: a rejected repeat of a harmful put took its commit and its blame).
- GiGPO, the reference: the same shares for its step advantage (A - A_episode).

Writes ``experiments/results/credit_placement.json`` and prints the table (``--smoke``: two
groups, nothing written).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import envs
from envs.household.env import parse, world_of
from envs.pool import EnvPool
from prover_jax import credit
from prover_jax.batch import pack
from prover_jax.credit.hosts import HostContext, HostOptions
from prover_jax.credit_report import turn_structure
from prover_jax.demonstrations import Demonstration
from prover_jax.rollout import Episode, ScriptedPolicy, run, start

ROOT = Path(__file__).resolve().parents[1]
ENV = "household-small"


class FlaggedPolicy(ScriptedPolicy):
    """The expert with random actions mixed in, each action flagged (`Demonstration.expert`)."""

    def act(self, episodes, slots, pool, rngs):
        return [Demonstration(text, expert=not noisy)
                for text, noisy in self.choose(episodes, slots, pool, rngs)]


def pivotal_tasks(env: envs.Env, count: int) -> list[envs.Task]:
    """Train tasks of the place types whose goal object starts only in closed receptacles."""
    chosen = []
    for task in env.tasks("train"):
        world = world_of(task)
        starts = [world.start[i] for i, t in enumerate(world.object_types)
                  if t == world.goal_type]
        if world.task_type in ("pick", "clean", "heat", "cool") and all(
                world.openable[r] for r in starts):
            chosen.append(task)
        if len(chosen) == count:
            return chosen
    return chosen


def pivotal_turns(episode: Episode) -> set[int]:
    """The turns that take a goal object."""
    world = world_of(episode.task)
    turns = set()
    for t, action in enumerate(episode.actions):
        parsed = parse(world, action.text)
        if parsed and parsed[0] == "take" and world.object_types[parsed[1]] == world.goal_type:
            turns.add(t)
    return turns


def harmful(episode: Episode, t: int) -> bool:
    """A random action that put a goal object down anywhere but a target receptacle (one the
    environment rejected changed nothing, so it is not harmful)."""
    world = world_of(episode.task)
    parsed = parse(world, episode.actions[t].text)
    return (not episode.actions[t].expert and episode.valid[t] and parsed is not None
            and parsed[0] == "put"
            and world.object_types[parsed[1]] == world.goal_type
            and world.receptacle_types[parsed[2]] != world.target_type)


def shares(ctx: HostContext, signal: np.ndarray) -> dict[str, float]:
    """Of the positive mass of `signal` [B, T] on successful trajectories, the share on expert
    turns and on detours; on failures, the share of harmful actions with a negative value, and
    the share of the negative mass on actions the environment rejected."""
    on_expert = on_detour = negative = on_rejected = 0.0
    harmful_values = []
    for row, _, _, episode in ctx.rows():
        for t, action in enumerate(episode.actions):
            value = float(signal[row, t])
            if episode.reward >= 1.0 and value > 0:
                if action.expert:
                    on_expert += value
                else:
                    on_detour += value
            if episode.reward < 1.0 and harmful(episode, t):
                harmful_values.append(value)
            if episode.reward < 1.0 and value < 0:
                negative -= value
                on_rejected -= 0.0 if episode.valid[t] else value
    total = on_expert + on_detour
    return {"positive_mass_on_expert": on_expert / total if total else 0.0,
            "positive_mass_on_detours": on_detour / total if total else 0.0,
            "harmful_actions": float(len(harmful_values)),
            "harmful_negative_share": (float(np.mean([v < 0 for v in harmful_values]))
                                       if harmful_values else 0.0),
            "negative_mass_on_rejected": on_rejected / negative if negative else 0.0}


def prover_placement(ctx: HostContext, judge: str, continuations: int) -> dict[str, float]:
    """ProVer's acceptance, Δ and how often an accepted segment holds the pivotal turn."""
    method = credit.get("prover")
    output = method.host(HostOptions(judge=judge, continuations=continuations),
                         method.config_type())(ctx)
    measured = [p for p in output.records["prover_proposals"] if "delta" in p]
    accepted = [p for p in measured if p["delta"] > 0]
    episodes = {row: e for row, _, _, e in ctx.rows()}
    hits = [bool(pivotal_turns(episodes[p["row"]])
                 & set(range(p["start_turn"], p["end_turn"] + 1))) for p in accepted]
    return {"proposals": float(len(output.records["prover_proposals"])),
            "measured": float(len(measured)),
            "acceptance_rate": len(accepted) / len(measured) if measured else 0.0,
            "mean_delta": float(np.mean([p["delta"] for p in measured])) if measured else 0.0,
            "accepted_with_pivotal_turn": float(np.mean(hits)) if hits else 0.0}


def measure(groups: int, group_size: int, epsilon: float, repeats: float, continuations: int,
            seed: int) -> dict[str, dict[str, float]]:
    """Every method's placement numbers on the same scripted groups."""
    env = envs.make(ENV)
    tasks = pivotal_tasks(env, groups)
    rng = random.Random(seed)
    policy = FlaggedPolicy(epsilon, repeats)
    with EnvPool(ENV, min(64, groups * group_size), num_workers=2) as pool:
        episodes = run(pool, policy, [start(t) for t in tasks for _ in range(group_size)], rng,
                       15)
        batched = [episodes[g * group_size:(g + 1) * group_size] for g in range(len(tasks))]
        batch = pack([[turn_structure(e) for e in g] for g in batched])
        ctx = HostContext(env, batched, pool, policy, rng, *batch.turn_valid.shape)
        out = {"groups": {"tasks": float(len(tasks)),
                          "success": float(np.mean([e.reward for e in episodes])),
                          "expert_share": float(np.mean([a.expert for e in episodes
                                                         for a in e.actions])),
                          "rejected_share": float(np.mean([not v for e in episodes
                                                           for v in e.valid]))},
               "prover": prover_placement(ctx, "contrastive", continuations),
               "prover-random-judge": prover_placement(ctx, "random", continuations)}
        grpo = np.asarray(credit.compute("grpo", batch).per_turn)
        vict = credit.get("vict")
        for name, groups_seen in (("vict", batched), ("vict-rejected-as-witnesses", [
                [dataclasses.replace(e, valid=(True,) * e.num_turns) for e in g]
                for g in batched])):
            seen = dataclasses.replace(ctx, groups=groups_seen)
            inputs = vict.host(HostOptions(), vict.config_type())(seen).inputs
            out[name] = shares(ctx, np.asarray(credit.compute("vict", batch, inputs).per_turn)
                               - grpo)
        gigpo = credit.get("gigpo")
        anchors = gigpo.host(HostOptions(), gigpo.config_type())(ctx).inputs
        result = credit.compute("gigpo", batch, anchors)
        step = np.asarray(result.per_turn) - np.asarray(result.outcome)[:, None]
        out["gigpo"] = shares(ctx, np.where(np.asarray(batch.turn_valid), step, 0.0))
    return out


def table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| method | metric | value |", "|---|---|---|"]
    for method, numbers in results.items():
        lines += [f"| {method} | {k} | {v:.3f} |" for k, v in numbers.items()]
    return "\n".join(lines)


def summary(results: dict[str, dict[str, float]]) -> str:
    """The table of docs/results.md ("Where credit lands") from the results."""
    g, p, r = results["groups"], results["prover"], results["prover-random-judge"]
    rows = [("groups", "success, expert's share of actions, rejected share of actions",
             f"{g['success']:.3f}, {g['expert_share']:.3f}, {g['rejected_share']:.3f}"),
            ("ProVer, contrastive judge", "eligible groups judged, acceptance (Δ > 0), mean Δ",
             f"{p['proposals']:.0f}, {p['acceptance_rate']:.3f}, {p['mean_delta']:+.3f}"),
            ("ProVer, contrastive judge", "accepted segments holding the pivotal turn",
             f"{p['accepted_with_pivotal_turn']:.3f}"),
            ("ProVer, random judge (control)", "proposals (valid draws), acceptance, mean Δ",
             (f"{r['proposals']:.0f} ({r['measured']:.0f}), {r['acceptance_rate']:.3f}, "
              f"{r['mean_delta']:+.3f}")),
            ("ProVer, random judge (control)", "accepted segments holding the pivotal turn",
             f"{r['accepted_with_pivotal_turn']:.3f}")]
    for name, label in (("vict", "VICT"),
                        ("vict-rejected-as-witnesses", "VICT, rejected actions as witnesses"),
                        ("gigpo", "GiGPO (reference)")):
        m = results[name]
        signal = "step advantage" if name == "gigpo" else "correction"
        rows += [(label, (f"positive {signal} mass on the expert's turns / on detours "
                          "(successes)"),
                  f"{m['positive_mass_on_expert']:.3f} / {m['positive_mass_on_detours']:.3f}"),
                 (label, ("harmful actions in failures (a goal object put anywhere but a "
                          f"target) with a negative {signal}"),
                  f"{m['harmful_negative_share']:.3f} of {m['harmful_actions']:.0f}"),
                 (label, f"negative {signal} mass in failures on rejected actions",
                  f"{m['negative_mass_on_rejected']:.3f}")]
    return "\n".join(["| method | measure | value |", "|---|---|---|",
                      *(f"| {a} | {b} | {c} |" for a, b, c in rows)])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="two groups, nothing written")
    parser.add_argument("--groups", type=int, default=128)
    parser.add_argument("--epsilon", type=float, default=0.55)
    parser.add_argument("--repeats", type=float, default=0.1,
                        help="share of actions replaced by the previous one again")
    parser.add_argument("--continuations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    groups = 2 if args.smoke else args.groups
    results = measure(groups, 8, args.epsilon, args.repeats,
                      2 if args.smoke else args.continuations, args.seed)
    print(table(results))
    print(summary(results))
    if not args.smoke:
        out = ROOT / "experiments" / "results" / "credit_placement.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"settings": vars(args), "results": results}, indent=2)
                       + "\n")


if __name__ == "__main__":
    main()
