"""ProVer's verification cost per group of 8, relative to the group's own rollouts.

Household tasks, a scripted policy (the expert with random actions mixed in at rate epsilon,
which leaves a realistic share of groups eligible: mean reward in (0, 0.5)), K = 8
continuations per boundary, offline judges. Every group is counted, eligible or not, as in a
training step. Reported: extra environment steps of the continuations over the groups' own
steps, and verification wall time over the wall time of rolling out the groups (2 workers).

The paper reports the cost in generated policy tokens: +2.4% on ALFWorld, +11.6% on WebShop,
+16.8% on SearchQA. With a scripted policy, steps stand in for tokens (one action per step).

Usage: python bench/prover_overhead.py [--groups 32] [--epsilon 0.7 0.8]
Prints a table, writes bench/results/prover_overhead.json and updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import envs
from bench import report
from envs.pool import EnvPool
from prover_jax import judges
from prover_jax.rollout import ScriptedPolicy, run, start
from prover_jax.verify import VerifyConfig, prover_step

GROUP, WORKERS, SLOTS = 8, 2, 64
PAPER = "ALFWorld +2.4%, WebShop +11.6%, SearchQA +16.8% (policy tokens)"


def measure(groups: int, epsilon: float, judge: str, seed: int = 0) -> dict:
    """One configuration: roll out the groups, then run ProVer's host side on them."""
    tasks = envs.make("household").tasks("train")[:groups]
    policy, rng = ScriptedPolicy(epsilon), random.Random(seed)
    with EnvPool("household", SLOTS, WORKERS) as pool:
        pool.reset([0], [tasks[0]])  # start-up is not rollout time
        begin = time.perf_counter()
        episodes = run(pool, policy, [start(t) for t in tasks for _ in range(GROUP)], rng)
        rollout_s = time.perf_counter() - begin
        batches = [episodes[g * GROUP:(g + 1) * GROUP] for g in range(groups)]
        begin = time.perf_counter()
        result = prover_step(pool, policy, judges.make(judge), batches, rng, VerifyConfig())
        verify_s = time.perf_counter() - begin
    d = result.diagnostics
    return {
        "epsilon": epsilon, "judge": judge, "groups": groups,
        "eligible_pct": 100.0 * d["eligible_groups"] / groups,
        "valid_proposals": d["valid_proposals"], "accepted": d["accepted"],
        "own_steps": sum(e.num_turns for e in episodes),
        "extra_steps": d["extra_env_steps"],
        "extra_steps_pct": 100.0 * d["extra_env_steps_fraction"],
        "rollout_s": rollout_s, "verify_s": verify_s,
        "extra_wall_pct": 100.0 * verify_s / rollout_s,
    }


def table(results: list[dict]) -> str:
    lines = [("| ε | judge | groups | eligible | valid / accepted | own steps | extra steps | "
              "extra steps % | extra wall % |"), "|---:|---|---:|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['epsilon']} | {r['judge']} | {r['groups']} | {r['eligible_pct']:.0f}% | "
              f"{r['valid_proposals']:.0f} / {r['accepted']:.0f} | {r['own_steps']} | "
              f"{r['extra_steps']:.0f} | {r['extra_steps_pct']:.1f}% | "
              f"{r['extra_wall_pct']:.1f}% |" for r in results]
    return "\n".join(lines) + f"\n\nPaper: {PAPER}."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--epsilon", type=float, nargs="*", default=[0.7, 0.8])
    parser.add_argument("--judges", nargs="*", default=["contrastive", "random"])
    args = parser.parse_args()
    results = [measure(args.groups, eps, judge) for eps in args.epsilon for judge in args.judges]
    body = table(results)
    print(body)
    report.write("prover_overhead", "ProVer verification overhead per group of 8 (household)",
                 report.machine(), body, results)


if __name__ == "__main__":
    main()
