"""GRPO vs ProVer vs VICT from one SFT start on household-small: ``python experiments/compare.py``.

1. SFT: the tiny Qwen3 warm-started on expert demonstrations
   (``configs/sft/household-small.yaml``), once; its final greedy held-out success is every
   arm's starting point.
2. RL: each arm (GRPO; ProVer with the contrastive judge and with the random judge, the paper's
   control; VICT; GiGPO; ProVer+VICT) for each seed, from that checkpoint, with the same number
   of updates and the same held-out evaluation every ``eval_every`` steps
   (``configs/household-small.yaml``). Each arm reports its extra rollout cost: ProVer's
   verification continuations, as a fraction of the groups' own environment steps. The
   budget-matched GRPO arm spends the same environment steps as the same seed's ProVer run, in
   larger groups (`spo_rollouts.budget_schedule_of_run`), so ProVer is also compared at equal
   cost.
3. Summary: final held-out success (mean ± std over seeds), its area under the curve (the mean
   over evaluations), the cost, and each method's diagnostics, as JSON
   (``experiments/results/compare.json``), a plot (``docs/results-compare.png``) and the table
   in ``docs/results.md``.

Runs live in ``experiments/runs/`` (checkpoints, not committed) and resume. Each finished run
leaves a record in ``experiments/results/runs/<arm>-seed<seed>/`` (its config and metrics,
committed), and the SFT run its model as a Hugging Face folder (``sft/model/``) that the arms
start from. A recorded run is never redone, so a comparison spread over several machines or
sessions goes on where it stopped, and the summary is made from the records alone.
``--smoke`` runs 1-2 steps of everything in a temporary folder and writes no results (CI runs
it so the script cannot rot). ``--arms`` and ``--seeds`` pick a subset; ``--report`` runs
nothing and summarizes the recorded runs (each arm lists its seeds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from prover_jax import runs as run_directories
from prover_jax.config import load as load_config
from prover_jax.plot import read_metrics
from prover_jax.sft import SftConfig
from prover_jax.sft_trainer import sft
from prover_jax.spo_rollouts import budget_schedule_of_run
from prover_jax.train import TrainConfig
from prover_jax.trainer import initial_model, train

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "household-small.yaml"
RECORDS = ROOT / "experiments" / "results" / "runs"
ARMS: dict[str, list[str]] = {
    "grpo": ["credit=grpo"],
    "prover": ["credit=prover", "host.judge=contrastive"],
    "prover-random-judge": ["credit=prover", "host.judge=random"],
    "vict": ["credit=vict"],
    "gigpo": ["credit=gigpo"],
    "prover+vict": ["credit=prover+vict", "host.judge=contrastive"],
    "grpo-budget-matched": ["credit=budget-matched-grpo"],
}
BUDGET_OF = {"grpo-budget-matched": "prover"}  # arm -> the arm whose cost it matches
SEEDS = (0, 1, 2)
SUCCESS = "eval/greedy/success"
SMOKE_SFT = ["steps=2", "learner.optimizer.warmup_steps=1", "demonstrations=4", "heldout=2",
             "batch_size=2", "eval_every=0", "evaluation.tasks=2", "tiny.vocab_size=256",
             "tiny.hidden_size=32", "tiny.layers=1", "tiny.intermediate_size=64", "tiny.head_dim=8",
             "tiny.tokenizer_episodes=5"]
SMOKE_RL = ["steps=1", "groups=1", "group_size=2", "max_actions=2", "eval_every=1",
            "evaluation.tasks=2", "evaluation.samples=0", "sampling.max_new_tokens=4",
            "host.continuations=1"]
COSTS = ("credit/prover/extra_env_steps_fraction", "credit/prover/extra_policy_tokens_fraction")
# Averaged over updates; ProVer's acceptance rate and mean Δ are pooled over proposals (`pooled`).
DIAGNOSTICS = ("credit/prover/eligible_groups", "credit/prover/valid_proposals",
               "credit/vict/abstained", "credit/vict/trigger_rate", "credit/vict/sparsity",
               "success/rate", "learner/entropy")


def quiet(line: str) -> None:
    del line


def sft_start(base: Path, records: Path, overrides: Sequence[str]) -> Path:
    """The SFT model every arm starts from: the recorded one, else the SFT run in
    ``base/sft`` (resumed or read if it is there), recorded with its model exported."""
    model = records / "sft" / "model"
    if not (model / "config.json").exists():
        run = base / "sft"
        config = load_config(SftConfig, ROOT / "configs" / "sft" / "household-small.yaml",
                             [*overrides, f"run_dir={run}"])
        sft(config, *initial_model(config), log=quiet)
        run_directories.export(run, model)
        record(run, records / "sft")
    return model


def run_arm(base: Path, records: Path, start: Path, arm: str, seed: int,
            overrides: Sequence[str]) -> Path:
    """The record of one arm and seed, run (or resumed) in ``base/<arm>-seed<seed>`` from the
    SFT model `start` unless it is recorded. A budget-matched arm needs the record of its
    reference's run of the seed."""
    name = run_name(arm, seed)
    if finished(records / name):
        return records / name
    directory = base / name
    changes = [*ARMS[arm], *overrides, f"seed={seed}", f"init={start}", f"run_dir={directory}"]
    if arm in BUDGET_OF:
        schedule = budget_schedule_of_run(records / run_name(BUDGET_OF[arm], seed),
                                          load_config(TrainConfig, CONFIG).group_size)
        changes.append(f"credit_config.schedule={json.dumps(schedule)}")
    config = load_config(TrainConfig, CONFIG, changes)
    train(config, *initial_model(config), log=quiet)
    return record(directory, records / name)


def record(run_dir: Path, destination: Path) -> Path:
    """Copies a run's config and metrics (its record) to `destination`; returns it."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "metrics.jsonl"):
        shutil.copyfile(run_dir / name, destination / name)
    return destination


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-seed{seed}"


def finished(run_dir: Path) -> bool:
    """True if `run_dir` holds a run that has made all the updates its config asks for."""
    if not (run_dir / "metrics.jsonl").exists():
        return False
    steps = json.loads((run_dir / "config.json").read_text())["steps"]
    rows = read_metrics(run_dir)
    return bool(rows) and rows[-1]["step"] + 1 >= steps


def curve(run_dir: Path, start_success: float) -> tuple[list[int], list[float]]:
    """(updates, held-out success) of a run, the SFT start as update 0."""
    points = [(row["step"] + 1, row[SUCCESS])
              for row in read_metrics(run_dir, before_training=False) if SUCCESS in row]
    return [0] + [u for u, _ in points], [start_success] + [s for _, s in points]


def summarize(runs: dict[str, dict[int, Path]], start_success: float) -> dict:
    """Per arm: final success and AUC (mean ± std over seeds), costs and diagnostics."""
    out = {}
    for arm, by_seed in runs.items():
        curves = {seed: curve(path, start_success) for seed, path in by_seed.items()}
        finals = [c[1][-1] for c in curves.values()]
        aucs = [float(np.mean(c[1])) for c in curves.values()]
        rows = [row for path in by_seed.values()
                for row in read_metrics(path, before_training=False)]
        out[arm] = {
            "seeds": sorted(by_seed),
            "final_success_mean": float(np.mean(finals)),
            "final_success_std": float(np.std(finals)),
            "auc_mean": float(np.mean(aucs)), "auc_std": float(np.std(aucs)),
            "curves": {str(seed): {"updates": c[0], "success": c[1]}
                       for seed, c in curves.items()},
            **{key: float(np.mean([r[key] for r in rows])) for key in COSTS + DIAGNOSTICS
               if all(key in r for r in rows)},
            **pooled(rows),
        }
    return out


def pooled(rows: list[dict]) -> dict[str, float]:
    """ProVer's acceptance rate and mean Δ over every verified proposal of `rows` (a logged
    rate is per update; its mean over updates would count updates without proposals as 0)."""
    verified = "credit/prover/valid_proposals"
    if not rows or not all(verified in r for r in rows):
        return {}
    total = sum(r[verified] for r in rows)
    return {"credit/prover/acceptance_rate": sum(r["credit/prover/accepted"] for r in rows) / total
            if total else 0.0,
            "credit/prover/mean_delta": sum(r["credit/prover/mean_delta"] * r[verified]
                                            for r in rows) / total if total else 0.0}


def table(summary: dict, start_success: float) -> str:
    """The markdown table of `summarize`."""
    header = ("| arm | seeds | final success | AUC | extra env steps | acceptance "
              "| VICT abstained |")
    lines = [f"SFT start: held-out greedy success {start_success:.3f}.", "", header,
             "|---|---|---|---|---|---|---|"]
    for arm, s in summary.items():
        def cell(key, s=s):
            return f"{s[key]:.3f}" if key in s else "-"

        lines.append(f"| {arm} | {len(s['seeds'])} | {s['final_success_mean']:.3f} ± "
                     f"{s['final_success_std']:.3f} | {s['auc_mean']:.3f} ± {s['auc_std']:.3f} "
                     f"| {cell(COSTS[0])} | {cell('credit/prover/acceptance_rate')} | "
                     f"{cell('credit/vict/abstained')} |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    """Success against updates, mean over seeds with each seed faint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.5, 4))
    for arm, s in summary.items():
        curves = list(s["curves"].values())
        line = ax.plot(curves[0]["updates"],
                       np.mean([c["success"] for c in curves], axis=0), label=arm)[0]
        for c in curves:
            ax.plot(c["updates"], c["success"], color=line.get_color(), alpha=0.2)
    ax.set_xlabel("updates")
    ax.set_ylabel("held-out greedy success")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="1-2 steps, nothing kept")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--report", action="store_true",
                        help="run nothing: summarize the runs that have finished")
    parser.add_argument("--runs", type=Path, help="where the runs live (default: "
                        "experiments/runs, with --smoke a temporary folder)")
    parser.add_argument("--records", type=Path, help="where the records live (default: "
                        "experiments/results/runs, with --smoke RUNS/records)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="compare-") as scratch:
        base = args.runs or (Path(scratch) if args.smoke else ROOT / "experiments" / "runs")
        records = args.records or (base / "records" if args.smoke else RECORDS)
        arms = [*args.arms, *(BUDGET_OF[a] for a in args.arms
                              if a in BUDGET_OF and BUDGET_OF[a] not in args.arms)]
        runs: dict[str, dict[int, Path]] = {arm: {} for arm in ARMS if arm in arms}
        if args.report:
            for seed in args.seeds:
                for arm in runs:
                    if finished(records / run_name(arm, seed)):
                        runs[arm][seed] = records / run_name(arm, seed)
            runs = {arm: by_seed for arm, by_seed in runs.items() if by_seed}
        else:
            start = sft_start(base, records, SMOKE_SFT if args.smoke else [])
            for seed in args.seeds:  # every arm's seed 0 first: a stopped comparison is one
                for arm in runs:
                    runs[arm][seed] = run_arm(base, records, start, arm, seed,
                                              SMOKE_RL if args.smoke else [])
        start_success = read_metrics(records / "sft")[-1][SUCCESS]
        summary = summarize(runs, start_success)
    print(table(summary, start_success))
    if not args.smoke:
        results = ROOT / "experiments" / "results"
        results.mkdir(parents=True, exist_ok=True)
        (results / "compare.json").write_text(json.dumps(
            {"start_success": start_success, "arms": summary}, indent=2) + "\n")
        plot(summary, ROOT / "docs" / "results-compare.png")


if __name__ == "__main__":
    main()
