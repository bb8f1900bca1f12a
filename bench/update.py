"""A trainer update on household-small, phase by phase: this tree against an earlier revision.

Each measurement is ``python -m prover_jax.train`` with the tree's own
``configs/household-small.yaml`` (4 tasks x 4 episodes an update, replies of up to 24 tokens)
from the committed SFT agent (``experiments/results/runs/sft``), no evaluation, no
checkpoints, in a process of its own with the persistent compile cache off, so a shape first
met in the middle of a run is compiled there, as it would be. GRPO and ProVer (the contrastive
judge, 4 continuations) run from the same start and seed, each in every setup: "turns"
(every reply of a turn decoded in one call), "continuous" (`sampling.decode_chunk` tokens
per call, rows taking their next turn between calls) and "continuous, 1 stale" (the same with
`asynchronous.max_staleness: 1`: the next update's rollout runs while the learner trains).
``--ref REV`` runs the turns setup in an export of revision REV (its code and its config), one
after the other on the same machine.

Each run's ``metrics.jsonl`` gives per update the seconds of the rollout, the credit and the
learner; the first update (which compiles every program) is dropped and the rest averaged.
An asynchronous update's time is the learner's wait for its batch and its training (the
rollout and credit overlap the previous update's training; their own seconds are shown).
ProVer's overhead is (ProVer's update / GRPO's update - 1) over the extra policy tokens its
continuations generated (as a fraction of the groups' own): 1 is a continuation token costing
what a group token costs. Where continuations ran, the tokens generated per second by the
groups' rollout and by the continuations say where a difference comes from.

Targets: an update <= 4.5 s on 2 idle cores; ProVer's overhead <= 1.25.

``--calls`` also runs ProVer's updates in this process, with each synchronous setup, and
counts every
`generate` call: in the groups' rollout and in the continuations, the rows that generated, the
share of the batch's row-steps that sampled a token (`RolloutStats.row_steps`; target >= 90%
in the continuations), the tokens, the cache's slots and the seconds without compiles
(`bench/rollout.py`'s timers), and the continuations' compiles by update.

Usage: python bench/update.py [--updates 6] [--ref REV] [--arms [grpo prover]]
       [--setups [turns continuous "continuous, 1 stale"]] [--calls]
Prints the tables, writes bench/results/update.json (and update-calls.json) and updates
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = ROOT / "experiments" / "results" / "runs" / "sft"
ARMS = {"grpo": ["credit=grpo"], "prover": ["credit=prover", "host.judge=contrastive"]}
SETUPS = {"turns": ["sampling.decode_chunk=0"], "continuous": ["sampling.decode_chunk=8"],
          "continuous, 1 stale": ["sampling.decode_chunk=8", "asynchronous.max_staleness=1"]}
UPDATES = 6


def export(revision: str, into: Path) -> Path:
    """The files of git `revision` under `into` (no checkout, the repository untouched)."""
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), revision],
                   cwd=ROOT, check=True)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def train(tree: Path, arm: str, updates: int, run_dir: Path, setup: Sequence[str] = ()
          ) -> list[dict]:
    """The per-update metrics of `updates` updates of `arm` run by the code in `tree`, with
    the `setup`'s settings."""
    changes = [*ARMS[arm], *setup, f"steps={updates}", "eval_every=0",
               f"checkpoint_every={updates}", f"init={START}", f"run_dir={run_dir}", "seed=0"]
    env = dict(os.environ, PYTHONPATH=str(tree), JAX_PLATFORMS="cpu", PROVER_JAX_CACHE="off")
    subprocess.run([sys.executable, "-m", "prover_jax.train", "--config",
                    str(tree / "configs" / "household-small.yaml"),
                    *[a for c in changes for a in ("--set", c)]],
                   cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("step", -1) >= 0 and "time/learner_s" in r]


def phases(updates: Sequence[dict]) -> dict:
    """Mean seconds per update of each phase and in all, over `updates` after the first
    (which compiles), with ProVer's extra policy tokens as a fraction of the groups'."""
    if len(updates) < 2:
        raise ValueError(f"need at least 2 updates to drop the compiling one, got {len(updates)}")
    from prover_jax.trainer import UPDATE_PHASES

    timed = updates[1:]
    out = {p: sum(u[f"time/{p}_s"] for u in timed) / len(timed) for p in UPDATE_PHASES}
    # asynchronous: the learner waits for the batch, whose rollout and credit overlapped
    waited = ("wait", "learner") if "time/wait_s" in timed[0] else UPDATE_PHASES
    out["update"] = sum(u[f"time/{p}_s"] for u in timed for p in waited) / len(timed)
    out["slowest_update"] = max(sum(u[f"time/{p}_s"] for p in waited) for u in timed)
    out["extra_tokens"] = sum(u.get("credit/prover/extra_policy_tokens_fraction", 0.0)
                              for u in timed) / len(timed)
    out["updates"] = len(timed)
    continued = [u for u in timed if u.get("credit/prover/extra_policy_tokens", 0.0) > 0]
    if continued:  # the groups' own tokens are known where continuations ran
        own = sum(u["credit/prover/extra_policy_tokens"]
                  / u["credit/prover/extra_policy_tokens_fraction"] for u in continued)
        out["group_tokens_per_s"] = own / sum(u["time/rollout_s"] for u in continued)
        out["continuation_tokens_per_s"] = (
            sum(u["credit/prover/extra_policy_tokens"] for u in continued)
            / sum(u["credit/prover/verification_wall_s"] for u in continued))
        out["verification"] = sum(u.get("credit/prover/verification_wall_s", 0.0)
                                  for u in timed) / len(timed)
    return out


def overhead(grpo: dict, prover: dict) -> float | None:
    """ProVer's update time over GRPO's, less one, per extra policy token fraction; None when
    ProVer generated no continuations."""
    if prover["extra_tokens"] <= 0:
        return None
    return (prover["update"] / grpo["update"] - 1) / prover["extra_tokens"]


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = [("| tree, setup | method | update (s) | rollout (s) | credit (s) | of which "
              "continuations (s) | learner (s) | slowest update (s) | extra policy tokens | "
              "ProVer overhead (target <= 1.25) | generated tok/s: groups | continuations | "
              "a continuation token's cost, a group token's = 1 (target <= 1.2) |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for tree, arms in results.items():
        for arm, p in arms.items():
            ratio = overhead(arms["grpo"], p) if arm == "prover" and "grpo" in arms else None
            rates = [f"{p[k]:.0f}" if k in p else "-" for k in
                     ("group_tokens_per_s", "continuation_tokens_per_s")]
            cost = (f"{p['group_tokens_per_s'] / p['continuation_tokens_per_s']:.2f}"
                    if "continuation_tokens_per_s" in p else "-")
            lines.append(
                f"| {tree} | {arm} | {p['update']:.2f} | {p['rollout']:.2f} | "
                f"{p['credit']:.2f} | {p.get('verification', 0.0):.2f} | {p['learner']:.2f} | "
                f"{p['slowest_update']:.2f} | {p['extra_tokens']:.0%} | "
                f"{'-' if ratio is None else f'{ratio:.2f}'} | {rates[0]} | {rates[1]} | "
                f"{cost} |")
    return "\n".join(lines)


def generate_calls(updates: int, setup: Sequence[str]) -> dict[str, dict]:
    """Every `generate` call of `updates` ProVer updates of this tree with the `setup`'s
    settings, run in this process: per phase (the groups' rollout, ProVer's continuations)
    the calls, the rows that generated in them, the share of the row-steps that sampled, the
    tokens generated, the cache's slots, and the seconds of `generate`, the row prefills and
    cache housekeeping without compiles; for the continuations also the compile seconds of
    each update."""
    import collections
    import time

    import jax

    from bench import rollout as rollout_bench
    from prover_jax import model_policy, trainer, verify
    from prover_jax.config import load as load_config
    from prover_jax.run_settings import TrainConfig

    rollout_bench.listen_to_compiles()
    # (rows, rows that generated, tokens, slots, row-steps)
    calls = {"groups": [], "continuations": []}
    phase = ["groups"]
    in_continuations = dict.fromkeys(rollout_bench.PHASES, 0.0)
    compiles = []
    with tempfile.TemporaryDirectory() as run_dir, rollout_bench.phase_timers() as seconds:
        timed_generate, timed_run = model_policy.generate, verify.run

        def counted_generate(params, cfg, prompt, positions, cache, *args, **kwargs):
            out = timed_generate(params, cfg, prompt, positions, cache, *args, **kwargs)
            lengths = jax.device_get(out.lengths)
            slots = max(jax.tree.leaves(out.cache), key=lambda x: x.size).shape[-2]
            calls[phase[0]].append((len(lengths), int((lengths > 0).sum()),
                                    int(lengths.sum()), slots, len(lengths) * int(lengths.max())))
            return out

        def continuations(*args, **kwargs):
            before, begin = dict(seconds), time.time()
            phase[0] = "continuations"
            try:
                return timed_run(*args, **kwargs)
            finally:
                phase[0] = "groups"
                compiles.append(rollout_bench.compile_seconds(begin, time.time()))
                for name in in_continuations:
                    in_continuations[name] += seconds[name] - before[name]

        model_policy.generate, verify.run = counted_generate, continuations
        try:
            config = load_config(TrainConfig, ROOT / "configs" / "household-small.yaml", [
                *ARMS["prover"], *setup, f"steps={updates}", "eval_every=0",
                f"checkpoint_every={updates}", f"init={START}", f"run_dir={run_dir}/run"])
            trainer.train(config, *trainer.initial_model(config), log=lambda line: None)
        finally:
            model_policy.generate, verify.run = timed_generate, timed_run
        totals = dict(seconds)
    out = {}
    for name, made in calls.items():
        spent = {p: in_continuations[p] if name == "continuations"
                 else totals[p] - in_continuations[p] for p in rollout_bench.PHASES}
        tokens = sum(c[2] for c in made)
        out[name] = {"calls": len(made), "rows": made[0][0] if made else 0,
                     "generating_rows": sum(c[1] for c in made) / max(len(made), 1),
                     "sampling_share": tokens / max(sum(c[4] for c in made), 1),
                     "tokens": tokens, "ms_per_token": 1e3 * spent["generate"] / max(tokens, 1),
                     "slots": dict(collections.Counter(c[3] for c in made)),
                     **{f"{p}_s": v for p, v in spent.items()}}
    out["continuations"]["compile_s_per_update"] = compiles
    return out


def calls_table(by_setup: dict[str, dict[str, dict]]) -> str:
    lines = [("| setup | phase | generate calls | rows generating (of the batch's) | "
              "row-steps that sampled | tokens generated | cache slots: calls | generate (s) | "
              "ms per token | prefill_rows + extend_rows (s) | housekeeping (s) |"),
             "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for setup, calls in by_setup.items():
        for name in ("groups", "continuations"):
            c = calls[name]
            slots = ", ".join(f"{s:,}: {n}" for s, n in sorted(c["slots"].items()))
            lines.append(f"| {setup} | {name} | {c['calls']} | "
                         f"{c['generating_rows']:.1f} of {c['rows']} | "
                         f"{c['sampling_share']:.0%} | {c['tokens']:,} | {slots} | "
                         f"{c['generate_s']:.2f} | {c['ms_per_token']:.2f} | "
                         f"{c['prefill_rows_s']:.2f} | {c['housekeeping_s']:.2f} |")
    lines.append("")
    for setup, calls in by_setup.items():
        compiles = ", ".join(f"{s:.1f}" for s in calls["continuations"]["compile_s_per_update"])
        lines.append(f"Compiles during the continuations, {setup}, by update (s): "
                     f"{compiles}")
    return "\n".join(lines)


def measure(tree: Path, updates: int, arms: Sequence[str], setup: Sequence[str] = ()
            ) -> dict[str, dict]:
    out = {}
    for arm in arms:
        with tempfile.TemporaryDirectory() as run_dir:
            out[arm] = phases(train(tree, arm, updates, Path(run_dir) / "run", setup))
        print(f"{tree} {' '.join(setup)}: {arm}: {json.dumps(out[arm])}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=UPDATES,
                        help="updates per run (the first, which compiles, is not timed)")
    parser.add_argument("--ref", metavar="REV", help="also measure this git revision")
    parser.add_argument("--arms", nargs="*", choices=list(ARMS), default=list(ARMS),
                        help="the methods timed (none: only --calls)")
    parser.add_argument("--setups", nargs="*", choices=list(SETUPS), default=list(SETUPS),
                        help="the samplers and update modes this tree runs with")
    parser.add_argument("--calls", action="store_true",
                        help="count the generate calls of ProVer's updates in this tree")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from bench import report

    machine = (f"{platform.machine()}, {os.cpu_count()} CPU cores; configs/household-small.yaml "
               f"from experiments/results/runs/sft, {args.updates} updates a run")
    if args.arms:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        results = {}
        with tempfile.TemporaryDirectory() as scratch:
            if args.ref:
                results[f"{args.ref}, turns"] = measure(export(args.ref, Path(scratch)),
                                                        args.updates, args.arms)
            for setup in args.setups:
                results[f"{head} (this tree), {setup}"] = measure(
                    ROOT, args.updates, args.arms, SETUPS[setup])
        print(table(results))
        if not args.no_write:
            report.write("update", "A trainer update on household-small (`bench/update.py`)",
                         machine + ", the first not timed", table(results), results)
    if args.calls:
        calls = {setup: generate_calls(args.updates, SETUPS[setup]) for setup in args.setups
                 if "asynchronous.max_staleness=1" not in SETUPS[setup]}
        print(calls_table(calls))
        if not args.no_write:
            report.write("update-calls", "Where ProVer's continuations spend their time "
                         "(`bench/update.py --calls`)", machine + ", every update counted",
                         calls_table(calls), calls)


if __name__ == "__main__":
    main()
