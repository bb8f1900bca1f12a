"""tau-bench environments: tool-call throughput, snapshot and restore latency, verifier cost.

For each domain, over every task of its test split:
- tool calls/s: ``env.step`` on the task's ground-truth tool calls (parse, argument check,
  tool, copy-on-write database update), timed call by call;
- episode end: the reward of a finished episode (database hash against the ground truth);
- snapshot / restore: ``env.snapshot()`` and ``env.restore(state)`` at the end of the expert's
  episode, and a pickle round trip of the state (what crossing a process boundary costs),
  against a deep copy of the domain's database (what a copy-the-world snapshot would cost);
- verifier: the atom statuses of one state (evidence extraction and evaluation).

Usage: python bench/tau.py [--repeats 5]
Prints a table, writes bench/results/tau.json and updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import envs  # noqa: E402
from bench import report  # noqa: E402
from envs.tau import data as data_lib  # noqa: E402
from envs.tau import episode  # noqa: E402
from envs.tau.actions import tool_call  # noqa: E402

DOMAINS = (("tau-retail", "retail"), ("tau-airline", "airline"))


def tool_throughput(env: envs.Env, tasks: list[envs.Task]) -> tuple[float, int]:
    """Ground-truth tool calls per second through ``env.step``, and how many were timed."""
    elapsed, calls = 0.0, 0
    for task in tasks:
        env.reset(task)
        domain = episode.domain_of(task)
        for action in episode.spec_of(task).actions:
            if domain.by_name[action.name].terminal:
                continue
            text = tool_call(action.name, action.kwargs)
            start = time.perf_counter()
            env.step(text)
            elapsed += time.perf_counter() - start
            calls += 1
    return calls / elapsed, calls


def expert_states(env: envs.Env, tasks: list[envs.Task]) -> list[episode.State]:
    """The final state of the expert's episode on each task."""
    states = []
    for task in tasks:
        env.reset(task)
        while not env.step(env.expert_action()).done:
            pass
        states.append(env.snapshot())
    return states


def per_state_us(fn, states: list, repeats: int) -> float:
    """Mean microseconds of ``fn(state)`` over ``states`` (best of ``repeats`` rounds)."""
    return 1e6 * report.best_seconds(lambda: [fn(state) for state in states], repeats) / len(states)


def bench_domain(name: str, domain: str, repeats: int) -> dict:
    """Every measurement of one domain."""
    env = envs.make(name)
    tasks = env.tasks("test")
    episode.ground_truth_hash(tasks[0])  # load the data before timing
    rates = [tool_throughput(env, tasks) for _ in range(repeats)]
    calls_per_s, calls = max(rates)[0], rates[0][1]
    states = expert_states(env, tasks)
    verifiers = {state.task: env.verifier(state.task) for state in states}
    for state in states:
        episode.ground_truth_hash(state.task)
    return {
        "domain": domain,
        "tasks": len(tasks),
        "tool_calls": calls,
        "tool_calls_per_s": calls_per_s,
        "reward_us": per_state_us(episode.reward, states, repeats),
        "snapshot_us": per_state_us(lambda s: env.snapshot(), states, repeats),
        "restore_us": per_state_us(env.restore, states, repeats),
        "pickle_roundtrip_us": per_state_us(lambda s: pickle.loads(pickle.dumps(s)), states,
                                            repeats),
        "state_bytes": statistics.mean(len(pickle.dumps(s)) for s in states),
        "deepcopy_db_ms": 1e3 * report.best_seconds(
            lambda: copy.deepcopy(data_lib.base(domain).tables), max(1, repeats // 2)),
        "verifier_us": per_state_us(lambda s: verifiers[s.task].statuses(s), states, repeats),
    }


def table(results: list[dict]) -> str:
    """The markdown table of :func:`bench_domain` results."""
    header = ("| domain | tool calls/s | reward (µs) | snapshot (µs) | restore (µs) | pickle "
              "round trip (µs) | state (KB) | deep copy of the DB (ms) | verifier statuses (µs) |")
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(
            f"| {r['domain']} | {r['tool_calls_per_s']:,.0f} | {r['reward_us']:.0f} | "
            f"{r['snapshot_us']:.2f} | {r['restore_us']:.2f} | {r['pickle_roundtrip_us']:.0f} | "
            f"{r['state_bytes'] / 1e3:.1f} | {r['deepcopy_db_ms']:.0f} | "
            f"{r['verifier_us']:.0f} |")
    return "\n".join(lines)


def run(repeats: int) -> list[dict]:
    """Measures both domains."""
    return [bench_domain(name, domain, repeats) for name, domain in DOMAINS]


def main() -> None:
    """Runs the benchmark, prints the table and records it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = run(args.repeats)
    calls = ", ".join(f"{r['domain']} {r['tool_calls']} calls over {r['tasks']} tasks"
                      for r in results)
    text = (f"{table(results)}\n\nTool calls: the ground-truth calls of every test task "
            f"({calls}), through `env.step`. Snapshot, restore, pickle, reward and verifier: "
            "per final state of the expert's episode on every test task. Best of "
            f"{args.repeats} rounds.")
    print(text)
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
               f"Python {platform.python_version()}")
    report.write("tau", "tau-bench environments (`bench/tau.py`)", machine, text, results)


if __name__ == "__main__":
    main()
