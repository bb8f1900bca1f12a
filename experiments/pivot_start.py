"""The pivotal testbed's start, measured before any RL: ``python experiments/pivot_start.py
MODEL``.

Rolls out groups of 8 episodes of household-pivot's held-out tasks with the model (a run
directory, sampled at temperature 1) and reports:

- the gate: sampled success, the share of groups of 8 with 0, 1-3, 4-7 and 8 successes (a
  credit method learns from the groups that mix both), valid actions, how failures end (a
  look-alike handled, or the turn limit), and how often the look-alike the agent delivers or
  handles is the goal object (1/3 for the clue-blind demonstrator it imitates);
- the comparison's primary metric at the start (`prover_jax.choice_probe`): the probability of
  the right choice at the first choice among look-alikes, teacher-forced at `PROBE_TASKS`
  held-out states the demonstrator reached (the same states for every run);
- every judge on the same groups (`prover_jax.verify.prover_step`, K continuations before and
  after each proposal): the eligible groups it judged, its valid proposals, its *pivot
  precision* (the share of valid proposals whose segment holds the turn that took the goal
  object, `Env.oracle_pivot`), its acceptance (Δ > 0), the precision of its accepted segments,
  and its median and mean Δ. The oracle judge's Δ is the Δ at the pivot.

Writes ``experiments/results/pivot_start-<the model's folder name>.json`` and prints the
tables (``--demonstrator``: the clue-blind demonstrator instead of a model; ``--smoke``: 3
groups, K = 2, 8 probe states, nothing written).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import envs
from envs.household.env import parse, world_of
from envs.household.pivot import CLUES
from envs.pool import EnvPool
from prover_jax import judges
from prover_jax.rollout import Episode, ScriptedPolicy, rng_streams, run, start
from prover_jax.verify import VerifyConfig, prover_step, select

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
ENV = "household-pivot"
JUDGES = ("oracle", "verifier", "contrastive", "random")
GROUP_SIZE = 8
PROBE_TASKS = 256  # held-out tasks whose demonstrated episodes give the probe states


def lookalike_chosen(episode: Episode) -> bool | None:
    """Whether the look-alike the episode delivered or handled last is the goal object; None
    if it never transformed or put one down."""
    world = world_of(episode.task)
    chosen = None
    for action, valid in zip(episode.actions, episode.valid):
        parsed = parse(world, action.text)
        if valid and parsed and parsed[0] in ("put", "heat", "cool", "clean") \
                and world.object_types[parsed[1]] == world.goal_type:
            chosen = parsed[1] == world.goal_object
    return chosen


def gate(groups: Sequence[Sequence[Episode]]) -> dict[str, float]:
    """Success, mixed groups, valid actions and how failures end."""
    episodes = [e for g in groups for e in g]
    wins = [sum(e.reward for e in g) for g in groups]
    failures = [e for e in episodes if e.reward < 1]
    chosen = [c for c in map(lookalike_chosen, episodes) if c is not None]
    return {
        "episodes": float(len(episodes)),
        "success": float(np.mean([e.reward for e in episodes])),
        "groups_0": float(np.mean([w == 0 for w in wins])),
        "groups_1_3": float(np.mean([1 <= w <= 3 for w in wins])),
        "groups_4_7": float(np.mean([4 <= w <= 7 for w in wins])),
        "groups_8": float(np.mean([w == len(g) for w, g in zip(wins, groups)])),
        "valid_actions": float(np.mean([v for e in episodes for v in e.valid])),
        "failures_lookalike_handled": float(np.mean([not e.truncated for e in failures]))
        if failures else 0.0,
        "failures_turn_limit": float(np.mean([e.truncated for e in failures]))
        if failures else 0.0,
        "goal_object_chosen": float(np.mean(chosen)) if chosen else 0.0,
        "mean_turns": float(np.mean([e.num_turns for e in episodes])),
    }


def judge_row(env: envs.Env, pool: EnvPool, policy, groups, name: str, continuations: int,
              seed: int) -> dict[str, float]:
    """One judge's proposals and their verification on `groups` (module docstring)."""
    verify = VerifyConfig(continuations=continuations)
    result = prover_step(pool, policy, judges.make(name), groups,
                         [random.Random(seed + g) for g in range(len(groups))], verify, env=env)
    holds = {}
    for g, proposal in enumerate(result.proposals):
        if proposal is not None and proposal.valid:
            (pivot, _) = env.oracle_pivot(groups[g][select(groups[g], verify)].states)
            holds[g] = proposal.start_turn <= pivot <= proposal.end_turn
    deltas = {m.group: m.delta for m in result.measurements}
    accepted = [g for g, d in deltas.items() if d > 0]
    judged = sum(p is not None for p in result.proposals)
    return {
        "judged": float(judged),
        "valid": float(len(holds)),
        "pivot_precision": float(np.mean(list(holds.values()))) if holds else 0.0,
        "accepted": float(len(accepted)),
        "acceptance_rate": len(accepted) / len(deltas) if deltas else 0.0,
        "accepted_pivot_precision": float(np.mean([holds[g] for g in accepted]))
        if accepted else 0.0,
        "median_delta": float(statistics.median(deltas.values())) if deltas else 0.0,
        "mean_delta": float(np.mean(list(deltas.values()))) if deltas else 0.0,
    }


def probe(model, env: envs.Env, pool: EnvPool, chat, tasks: int = PROBE_TASKS
          ) -> dict[str, float]:
    """The choice probe of `model` ((cfg, params, tokenizer)) on the fixed held-out states of
    the first `tasks` held-out tasks."""
    from prover_jax.choice_probe import held_out_probes, probe_metrics
    from prover_jax.learner import Learner

    cfg, params, tokenizer = model
    probes, pad = held_out_probes(pool, env, tokenizer, chat, env.tasks("eval")[:tasks])
    learner = Learner(cfg)
    return probe_metrics(lambda tokens: learner.logprobs(params, tokens), probes, pad,
                         cfg.max_position_embeddings)


def model_policy(model, env: envs.Env, max_new_tokens: int, chat):
    """`model` ((cfg, params, tokenizer)) sampling at temperature 1."""
    from prover_jax.model_policy import ModelPolicy
    from prover_jax.settings import SamplingConfig

    cfg, params, tokenizer = model
    return ModelPolicy(params, cfg, tokenizer, env.instruction(),
                       SamplingConfig(max_new_tokens=max_new_tokens), chat)


def measure(policy, tasks: int, continuations: int, seed: int, slots: int, model=None,
            chat=None, probe_tasks: int = PROBE_TASKS, judge_names: Sequence[str] = JUDGES,
            clue: str = "once") -> dict[str, dict[str, float]]:
    """The gate, the probe (with a `model`, on `probe_tasks`) and the rows of `judge_names` on
    `tasks` held-out tasks × 8 episodes, of household-pivot with its option `clue`."""
    env = envs.make(ENV, clue=clue)
    chosen = env.tasks("eval")[:tasks]
    with EnvPool(ENV, slots, num_workers=2, config={"clue": clue}) as pool:
        episodes = run(pool, policy, [start(t) for t in chosen for _ in range(GROUP_SIZE)],
                       rng_streams(random.Random(seed), len(chosen) * GROUP_SIZE),
                       progress="rollout")
        groups = [episodes[g * GROUP_SIZE:(g + 1) * GROUP_SIZE] for g in range(len(chosen))]
        out = {"gate": gate(groups)}
        if model is not None:
            out["probe"] = probe(model, env, pool, chat, probe_tasks)
        for name in judge_names:
            out[name] = judge_row(env, pool, policy, groups, name, continuations, seed + 1)
    return out


def gate_table(gate_numbers: dict[str, float]) -> str:
    """The gate's table (docs/results.md)."""
    g = gate_numbers
    rows = [("episodes (groups of 8)", f"{g['episodes']:.0f}"),
            ("sampled success", f"{g['success']:.3f}"),
            ("groups with 0 / 1-3 / 4-7 / 8 successes",
             (f"{g['groups_0']:.2f} / {g['groups_1_3']:.2f} / {g['groups_4_7']:.2f} / "
              f"{g['groups_8']:.2f}")),
            ("valid actions", f"{g['valid_actions']:.3f}"),
            ("failures: a look-alike handled / the turn limit",
             f"{g['failures_lookalike_handled']:.2f} / {g['failures_turn_limit']:.2f}"),
            ("the look-alike delivered or handled is the goal object",
             f"{g['goal_object_chosen']:.3f}"),
            ("actions per episode", f"{g['mean_turns']:.1f}")]
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def probe_line(numbers: dict[str, float]) -> str:
    """The probe's sentence (docs/results.md)."""
    return (f"choice probe on {numbers['states']:.0f} held-out states: {numbers['score']:.3f} "
            f"(p(take) of the goal object {numbers['p_right_action']:.3f}, of a look-alike "
            f"{numbers['p_wrong_action']:.3f})")


def judges_table(results: dict[str, dict[str, float]]) -> str:
    """The judges' table (docs/results.md)."""
    lines = [("| judge | groups judged | valid proposals | pivot precision | accepted (Δ > 0) "
              "| accepted holding the pivot | median Δ | mean Δ |"),
             "|---|---|---|---|---|---|---|---|"]
    for name in (name for name in JUDGES if name in results):
        r = results[name]
        lines.append(f"| {name} | {r['judged']:.0f} | {r['valid']:.0f} | "
                     f"{r['pivot_precision']:.3f} | {r['accepted']:.0f} "
                     f"({r['acceptance_rate']:.2f}) | {r['accepted_pivot_precision']:.3f} | "
                     f"{r['median_delta']:+.3f} | {r['mean_delta']:+.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="a run directory (the start)")
    parser.add_argument("--demonstrator", action="store_true",
                        help="the clue-blind demonstrator instead of a model")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--continuations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--judges", default=",".join(JUDGES),
                        help="the judges to measure, comma-separated (empty: the gate alone)")
    parser.add_argument("--clue", choices=CLUES, default="once",
                        help="household-pivot's option: the clue shown once, in every "
                        "observation, or as a mark on the goal object")
    parser.add_argument("--smoke", action="store_true", help="3 groups, K = 2, nothing written")
    parser.add_argument("--out", help="the JSON file (default: experiments/results/"
                        "pivot_start-<the model's folder name>[-clue-<CLUE>].json)")
    args = parser.parse_args(argv)
    if (args.model is None) != args.demonstrator:
        parser.error("give a model (a run directory) or --demonstrator")
    env, model, chat = envs.make(ENV, clue=args.clue), None, None
    if args.demonstrator:
        policy = ScriptedPolicy(0.0)
    else:
        from prover_jax import compile_cache, runs
        from prover_jax.settings import ChatConfig

        compile_cache.enable()
        model = runs.load(args.model)
        chat = runs.stored_chat(args.model) or ChatConfig()
        policy = model_policy(model, env, args.max_new_tokens, chat)
    results = measure(policy, 3 if args.smoke else args.tasks,
                      2 if args.smoke else args.continuations, args.seed, args.slots, model,
                      chat, 8 if args.smoke else PROBE_TASKS,
                      [name for name in args.judges.split(",") if name], args.clue)
    print(gate_table(results["gate"]))
    if "probe" in results:
        print(probe_line(results["probe"]))
    if any(name in results for name in JUDGES):
        print(judges_table(results))
    if not args.smoke:
        variant = "" if args.clue == "once" else f"-clue-{args.clue}"
        name = Path(args.model or "demonstrator").name.removesuffix(variant)
        out = Path(args.out or RESULTS / f"pivot_start-{name}{variant}.json")
        settings = {k: v for k, v in vars(args).items() if k != "out"}
        out.write_text(json.dumps({"settings": settings, "results": results}, indent=2) + "\n")
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
