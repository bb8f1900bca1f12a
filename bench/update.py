"""A trainer update on household-small, phase by phase: this tree against an earlier revision.

Each measurement is ``python -m prover_jax.train`` with the tree's own
``configs/household-small.yaml`` (4 tasks x 4 episodes an update, replies of up to 24 tokens)
from the committed SFT agent (``experiments/results/runs/sft``), no evaluation, no
checkpoints, in a process of its own with the persistent compile cache off, so a shape first
met in the middle of a run is compiled there, as it would be. GRPO and ProVer (the contrastive
judge, 4 continuations) run from the same start and seed. ``--ref REV`` runs the same in an
export of revision REV (its code and its config), one after the other on the same machine.

Each run's ``metrics.jsonl`` gives per update the seconds of the rollout, the credit and the
learner; the first update (which compiles every program) is dropped and the rest averaged.
ProVer's overhead is (ProVer's update / GRPO's update - 1) over the extra policy tokens its
continuations generated (as a fraction of the groups' own): 1 is a continuation token costing
what a group token costs.

Targets: an update <= 4.5 s on 2 idle cores; ProVer's overhead <= 1.25.

Usage: python bench/update.py [--updates 6] [--ref REV]
Prints a table, writes bench/results/update.json and updates bench/RESULTS.md.
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
PHASES = ("rollout", "credit", "learner")
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


def train(tree: Path, arm: str, updates: int, run_dir: Path) -> list[dict]:
    """The per-update metrics of `updates` updates of `arm` run by the code in `tree`."""
    changes = [*ARMS[arm], f"steps={updates}", "eval_every=0", f"checkpoint_every={updates}",
               f"init={START}", f"run_dir={run_dir}", "seed=0"]
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
    timed = updates[1:]
    out = {p: sum(u[f"time/{p}_s"] for u in timed) / len(timed) for p in PHASES}
    out["update"] = sum(out[p] for p in PHASES)
    out["slowest_update"] = max(sum(u[f"time/{p}_s"] for p in PHASES) for u in timed)
    out["extra_tokens"] = sum(u.get("credit/prover/extra_policy_tokens_fraction", 0.0)
                              for u in timed) / len(timed)
    out["updates"] = len(timed)
    return out


def overhead(grpo: dict, prover: dict) -> float | None:
    """ProVer's update time over GRPO's, less one, per extra policy token fraction; None when
    ProVer generated no continuations."""
    if prover["extra_tokens"] <= 0:
        return None
    return (prover["update"] / grpo["update"] - 1) / prover["extra_tokens"]


def table(results: dict[str, dict[str, dict]]) -> str:
    lines = [("| tree | method | update (s) | rollout (s) | credit (s) | learner (s) | slowest "
              "update (s) | extra policy tokens | ProVer overhead (target <= 1.25) |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for tree, arms in results.items():
        for arm, p in arms.items():
            ratio = overhead(arms["grpo"], p) if arm == "prover" and "grpo" in arms else None
            lines.append(
                f"| {tree} | {arm} | {p['update']:.2f} | {p['rollout']:.2f} | "
                f"{p['credit']:.2f} | {p['learner']:.2f} | {p['slowest_update']:.2f} | "
                f"{p['extra_tokens']:.0%} | {'-' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines)


def measure(tree: Path, updates: int, arms: Sequence[str]) -> dict[str, dict]:
    out = {}
    for arm in arms:
        with tempfile.TemporaryDirectory() as run_dir:
            out[arm] = phases(train(tree, arm, updates, Path(run_dir) / "run"))
        print(f"{tree}: {arm}: {json.dumps(out[arm])}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=UPDATES,
                        help="updates per run (the first, which compiles, is not timed)")
    parser.add_argument("--ref", metavar="REV", help="also measure this git revision")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.ref:
            results[args.ref] = measure(export(args.ref, Path(scratch)), args.updates,
                                        args.arms)
        results[f"{head} (this tree)"] = measure(ROOT, args.updates, args.arms)
    text = table(results)
    print(text)
    if args.no_write:
        return
    from bench import report

    machine = (f"{platform.machine()}, {os.cpu_count()} CPU cores; configs/household-small.yaml "
               f"from experiments/results/runs/sft, {args.updates} updates a run, the first "
               "not timed")
    report.write("update", "A trainer update on household-small (`bench/update.py`)", machine,
                 text, results)


if __name__ == "__main__":
    main()
