"""Environment speed: steps per second on one core, snapshot + restore latency, pool throughput.

For each environment, action sequences (random actions mixed with expert actions, so episodes
both wander and finish) are recorded first, then replayed: timing covers ``reset`` + ``step``
only, not choosing actions. ``snapshot + restore`` is one snapshot and one restore of a
mid-episode state. The pool row replays the same sequences on 64 slots over 2 worker
processes, one batched ``step`` per turn, and counts environment steps per second of wall time
(pipe transfer and pickling included).

Targets (household): >= 20,000 steps/s/core and snapshot + restore <= 20 µs.

ALFWorld's engine (``alfworld``, ``alfworld-small``) has no snapshot: restoring replays the
episode's actions from a reset, so for it the second table gives the restore's cost against the
number of actions replayed. Its planner (the expert) takes seconds in household-sized rooms, so
it records fewer episodes (``EPISODES``).

Usage: python bench/envs.py [--envs household webshop ...] [--episodes 200]
Prints a table, writes bench/results/envs.json and updates bench/RESULTS.md.
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

TARGETS = {"household": (20_000.0, 20.0)}
POOL_SLOTS, POOL_WORKERS = 64, 2
EPISODES = {"alfworld": 12, "alfworld-small": 40}  # at most, for the slow engines
REPLAYING = ("alfworld", "alfworld-small")  # environments that restore by replay
REPLAYED = (0, 5, 10, 20)  # actions replayed by a restore
LOADS = 3


def record(name: str, episodes: int, seed: int = 0) -> list[tuple[envs.Task, list[str]]]:
    """Action sequences: each action random with probability 0.5, else the expert's."""
    env, rng = envs.make(name), random.Random(seed)
    tasks = [t for split in env.splits for t in env.tasks(split)]
    out = []
    for task in rng.sample(tasks, min(episodes, len(tasks))):
        env.reset(task)
        actions = []
        for _ in range(env.max_turns):
            action = env.random_action(rng) if rng.random() < 0.5 else env.expert_action()
            actions.append(action)
            if env.step(action).done:
                break
        out.append((task, actions))
    return out


def steps_per_second(name: str, episodes) -> float:
    """Replays the episodes in this process; environment steps per second."""
    env = envs.make(name)
    for task, _ in episodes[:3]:  # warm caches (generated worlds, indexes)
        env.reset(task)
    best = 0.0
    for _ in range(3):
        count, start = 0, time.perf_counter()
        for task, actions in episodes:
            env.reset(task)
            for action in actions:
                env.step(action)
            count += len(actions)
        best = max(best, count / (time.perf_counter() - start))
    return best


def snapshot_restore_us(name: str, episodes, seconds: float = 1.0) -> float:
    """Mean µs of one snapshot plus one restore of a mid-episode state (repeated for about
    ``seconds``, each state at least once)."""
    env = envs.make(name)
    states = []
    for task, actions in episodes[:20]:
        env.reset(task)
        for action in actions[: len(actions) // 2]:
            env.step(action)
        states.append(env.snapshot())
    for state in states:
        env.restore(state)
    count, start = 0, time.perf_counter()
    while count < len(states) or time.perf_counter() - start < seconds:
        env.restore(states[count % len(states)])
        env.snapshot()
        count += 1
    return (time.perf_counter() - start) / count * 1e6


def replay_restore_ms(name: str, episodes) -> dict[str, dict[int, float]]:
    """Replaying environments: mean ms to restore a state of ``n`` actions (n in REPLAYED),
    "live" when the task's engine is loaded but elsewhere in the episode (a reset and n
    actions), "load" when another task was played in between (the game loaded first)."""
    from envs.alfworld.env import LIVE_ENGINES

    env = envs.make(name)
    states = {}
    for task, actions in episodes:
        env.reset(task)
        for n in range(len(actions) + 1):
            if n in REPLAYED:
                states.setdefault(n, []).append(env.snapshot())
            if n < len(actions) and env.step(actions[n]).done:
                break
    # enough other tasks to take every live engine (each load costs a second or so, so the
    # "load" figure is a mean over the first LOADS states)
    others = [envs.Task(name, env.splits[-1], i) for i in range(LIVE_ENGINES + 1)]
    cost: dict[str, dict[int, float]] = {"live": {}, "load": {}}
    for n, found in sorted(states.items()):
        for kind in cost:
            total = 0.0
            if kind == "load":
                found = found[:LOADS]
            for state in found:
                if kind == "live":
                    env.reset(state.task)
                    env.step("wait")  # not a prefix of the state: the restore resets
                else:
                    for other in others:
                        if other != state.task:
                            env.reset(other)
                start = time.perf_counter()
                env.restore(state)
                total += time.perf_counter() - start
            cost[kind][n] = total / len(found) * 1e3
    return cost


def pool_steps_per_second(name: str, episodes) -> float:
    """Steps per second of wall time on POOL_SLOTS slots over POOL_WORKERS workers."""
    queue = list(episodes)
    with EnvPool(name, POOL_SLOTS, POOL_WORKERS) as pool:
        warm = list(range(POOL_WORKERS))  # one slot per worker: start-up and imports are
        pool.reset(warm, [queue[0][0]] * len(warm))  # not throughput
        running: dict[int, list[str]] = {}
        count, start = 0, time.perf_counter()
        while queue or running:
            free = [s for s in range(POOL_SLOTS) if s not in running][: len(queue)]
            if free:
                batch = [queue.pop() for _ in free]
                pool.reset(free, [task for task, _ in batch])
                running.update({s: list(actions) for s, (_, actions) in zip(free, batch)})
            slots = sorted(running)
            pool.step(slots, [running[s].pop(0) for s in slots])
            count += len(slots)
            running = {s: rest for s, rest in running.items() if rest}
        return count / (time.perf_counter() - start)


def run(names: list[str], episodes: int) -> list[dict]:
    results = []
    for name in names:
        recorded = record(name, min(episodes, EPISODES.get(name, episodes)))
        row = {
            "env": name,
            "steps": sum(len(a) for _, a in recorded),
            "steps_per_s": steps_per_second(name, recorded),
            "snapshot_restore_us": snapshot_restore_us(name, recorded),
            "pool_steps_per_s": pool_steps_per_second(name, recorded),
        }
        if name in REPLAYING:
            row["replay_restore_ms"] = replay_restore_ms(name, recorded)
        print(f"{name}: {row}", flush=True)
        results.append(row)
    return results


def table(results: list[dict]) -> str:
    lines = [("| env | steps/s (1 core) | target | snapshot+restore µs | target | "
              f"pool steps/s ({POOL_WORKERS} workers, {POOL_SLOTS} slots) |"),
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        steps_target, latency_target = TARGETS.get(r["env"], (None, None))
        lines.append(
            f"| {r['env']} | {r['steps_per_s']:,.0f} | "
            f"{f'≥ {steps_target:,.0f}' if steps_target else '-'} | "
            f"{r['snapshot_restore_us']:.2f} | "
            f"{f'≤ {latency_target:.0f}' if latency_target else '-'} | "
            f"{r['pool_steps_per_s']:,.0f} |")
    replaying = [r for r in results if "replay_restore_ms" in r]
    if replaying:
        lines += ["", "| env, engine | " + " | ".join(f"restore, {n} actions replayed (ms)"
                                                    for n in REPLAYED) + " |",
                  "|---|" + "---:|" * len(REPLAYED)]
        for r in replaying:
            for kind, cost in r["replay_restore_ms"].items():
                cost = {int(n): ms for n, ms in cost.items()}
                lines.append(f"| {r['env']}, {kind} | " + " | ".join(
                    f"{cost[n]:.1f}" if n in cost else "-" for n in REPLAYED) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="*", default=envs.names(served=False))
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    results = run(args.envs, args.episodes)
    body = table(results)
    print(body)
    report.write("envs", "Environments: steps/s, snapshot + restore, pool", report.machine(), body,
                 results)


if __name__ == "__main__":
    main()
