"""GRPO vs ProVer vs VICT from one SFT start: ``python experiments/compare.py``.

Pre-registered studies, picked with ``--study`` (`STUDIES`): on household-small the first
(``first``, the default) and a powered one (``powered``), made over several sittings; on
household-pivot the pilot of the positive controls (``pivot-pilot``), and the same pilot on
its marked clue (``pivot-pilot-marked``); and GRPO with
asynchronous updates beside the powered study's synchronous GRPO (``asynchronous``).

The first study:

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

The powered study (``configs/household-small-powered.yaml``; docs/results.md, "A comparison
with the power to answer") starts from a stronger SFT model, the committed one trained further
in three stages (``configs/sft/household-small-continued.yaml``, ``-recovery.yaml`` and
``-recovery2.yaml``; the last recorded in ``experiments/results/runs/sft-recovery2/``), and
runs GRPO, ProVer, VICT, GiGPO and budget-matched GRPO for seeds 0-4: 60 updates of 2 tasks
x 8 episodes, held-out greedy success on 100 tasks every 20. Its runs live in
``experiments/runs/powered/``, and its records (``experiments/results/powered/<arm>-seed<seed>/``)
also hold ``final_eval.json``: the final
model's greedy and sampled (4 per task) success on those tasks. Its summary
(``experiments/results/powered.json``, ``docs/results-powered.png``) holds each run's AUC (the
mean over updates 0, 20, 40 and 60), final and per-task-type success, each arm's paired
per-seed differences to GRPO with a bootstrap interval over seeds, the share of groups holding
both a success and a failure, VICT's abstentions by reason, ProVer's acceptance, mean Δ and
extra environment steps, and each run's seconds per update; its tables (``--report`` prints
them) are the primary one, the secondary figures' paired differences and the diagnostics.

The pivot pilot (``pivot-pilot``; docs/results.md, "A testbed where a decision decides the
outcome") runs GRPO and the two positive controls (ProVer with the oracle judge, the dense
oracle credit) on household-pivot from its second SFT stage (``configs/household-pivot.yaml``,
start ``experiments/results/runs/sft-pivot-2/``), seeds 0-2: 40 updates of 4 tasks x 8
episodes, the choice probe before them and every 10. Its records go to
``experiments/results/pivot-pilot/``; its summary (``experiments/results/pivot-pilot.json``,
``docs/results-pivot-pilot.png``) holds each run's probe area (the mean of its probe scores),
each arm's paired differences to GRPO with a bootstrap interval, the one-sided paired t-test
(raw and Holm-adjusted over the arms), the sign test and whether the arm separates (above GRPO
in every seed, t-test p < 0.05), and the diagnostics (each credit part's share of the advantage
mass among them).

The marked pilot (``pivot-pilot-marked``; docs/results.md, "The pilot stopped") is the pivot
pilot, the same arms, seeds, start and rule, on household-pivot with ``clue: marked``
(``configs/household-pivot-marked.yaml``); its records go to
``experiments/results/pivot-pilot-marked/``.

The asynchronous study (``asynchronous``; docs/results.md, "Asynchronous updates") runs the
powered study's GRPO with ``asynchronous.max_staleness: 1`` (arm ``grpo-async``), seeds 0-2,
beside that study's own GRPO records (its records folder is the powered study's); its summary
is ``experiments/results/asynchronous.json`` and ``docs/results-asynchronous.png``.

``--smoke`` runs 1-2 steps of everything in a temporary folder and writes no results (CI runs
it so the script cannot rot). ``--arms`` and ``--seeds`` pick a subset; ``--report`` runs
nothing and summarizes the recorded runs (each arm lists its seeds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from envs.pool import EnvPool
from prover_jax import runs as run_directories
from prover_jax.config import load as load_config
from prover_jax.interrupt import exit_when_interrupted
from prover_jax.plot import read_metrics
from prover_jax.run_settings import SftConfig, TrainConfig, run_env
from prover_jax.settings import MAX_SLOTS, eval_slots
from prover_jax.sft_trainer import sft
from prover_jax.spo_rollouts import budget_schedule_of_run
from prover_jax.trainer import UPDATE_PHASES, held_out, initial_model, train

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
ARMS: dict[str, list[str]] = {
    "grpo": ["credit=grpo"],
    "prover": ["credit=prover", "host.judge=contrastive"],
    "prover-random-judge": ["credit=prover", "host.judge=random"],
    "vict": ["credit=vict"],
    "gigpo": ["credit=gigpo"],
    "prover+vict": ["credit=prover+vict", "host.judge=contrastive"],
    "grpo-budget-matched": ["credit=budget-matched-grpo"],
    "prover-oracle-judge": ["credit=prover", "host.judge=oracle"],
    "prover-verifier-judge": ["credit=prover", "host.judge=verifier"],
    "oracle-progress": ["credit=oracle-progress"],
    "grpo-async": ["credit=grpo", "asynchronous.max_staleness=1"],
}
BUDGET_OF = {"grpo-budget-matched": "prover"}  # arm -> the arm whose cost it matches
SUCCESS = "eval/greedy/success"
SAMPLED_SUCCESS = "eval/sampled/success"
PROBE = "eval/probe/score"  # the pivotal testbed's primary metric (`prover_jax.choice_probe`)
DISCRIMINATION = "discrimination_area"  # p(right) - p(wrong), averaged over a run's probes
RECORD = ("config.json", "metrics.jsonl")  # a run's record
FINAL_EVAL = "final_eval.json"  # in a powered run's record: `final_evaluation`
# A smoke SFT starts from a tiny model of its own, never from a recorded one.
SMOKE_SFT = ["init=null", "steps=2", "learner.optimizer.warmup_steps=1", "demonstrations=4",
             "heldout=2", "batch_size=2", "eval_every=0", "evaluation.tasks=2",
             "evaluation.max_actions=2", "tiny.vocab_size=256", "tiny.hidden_size=32",
             "tiny.layers=1", "tiny.intermediate_size=64", "tiny.head_dim=8",
             "tiny.tokenizer_episodes=5"]
SMOKE_RL = ["steps=1", "groups=1", "group_size=2", "max_actions=2", "eval_every=1",
            "evaluation.tasks=2", "evaluation.samples=0", "sampling.max_new_tokens=4",
            "host.continuations=1"]
COSTS = ("credit/prover/extra_env_steps_fraction", "credit/prover/extra_policy_tokens_fraction")
# Averaged over updates; ProVer's acceptance rate and mean Δ are pooled over proposals (`pooled`).
DIAGNOSTICS = ("credit/prover/eligible_groups", "credit/prover/valid_proposals",
               "credit/vict/abstained", "credit/vict/trigger_rate", "credit/vict/sparsity",
               "success/rate", "learner/entropy")
# A pivotal-testbed run's diagnostics, averaged over its updates (key prefixes).
PIVOT_PER_UPDATE = ("success/", "episode/valid_actions", "credit/mass/",
                    "credit/prover/eligible_groups", "credit/prover/valid_proposals",
                    "credit/prover/extra_", "credit/vict/abstain")
MASS_OUTCOME = "credit/mass/outcome"  # GRPO's share of the advantage mass (`advantage_mass`)
# A powered run's diagnostics, averaged over its updates (key prefixes).
PER_UPDATE = ("success/mixed_groups", "episode/count", "credit/vict/abstain",
              "credit/prover/extra_env_steps_fraction")
UPDATE_SECONDS = "time/update_s"


def quiet(line: str) -> None:
    del line


@dataclasses.dataclass(frozen=True)
class Study:
    """A pre-registered comparison: what it runs, and where its records and results go.

    Attributes:
      config: the arms' RL config.
      sft_config: the SFT config of the arms' start.
      start: the start's record, its model in ``model/`` (run in the runs folder under the
        record's name if it is not there); with the records kept elsewhere (``--smoke``,
        ``--records``), its namesake there.
      runs: the folder of the arms' run directories within the runs folder ("": the runs
        folder itself).
      records: the folder of the arms' records (``<arm>-seed<seed>/``).
      arms, seeds: what it runs unless told otherwise.
      final_samples: sampled episodes per held-out task in a run's `final_evaluation`, recorded
        in `FINAL_EVAL` (0: none).
      summarize, table: the summary of the records (its JSON) and its markdown table.
      summary, plot: where the summary and its plot are written.
      curve, y_label: the summary's curves' series that the plot draws, and its label.
    """

    config: Path
    sft_config: Path
    start: Path
    runs: str
    records: Path
    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    final_samples: int
    summarize: Callable[[dict[str, dict[int, Path]], float], dict]
    table: Callable[[dict, float], str]
    summary: Path
    plot: Path
    curve: str = "success"
    y_label: str = "held-out greedy success"

    @property
    def record_files(self) -> tuple[str, ...]:
        """The files of a finished run's record."""
        return RECORD + ((FINAL_EVAL,) if self.final_samples else ())


def sft_start(sft_config: Path, run: Path, destination: Path, overrides: Sequence[str]) -> Path:
    """The SFT model the arms start from: the one recorded in `destination`, else the SFT run
    of `sft_config` in `run` (resumed or read if it is there), recorded there with its model
    exported."""
    model = destination / "model"
    if not (model / "config.json").exists():
        config = load_config(SftConfig, sft_config, [*overrides, f"run_dir={run}"])
        sft(config, *initial_model(config), log=quiet)
        run_directories.export(run, model)
        record(run, destination)
    return model


def run_arm(study: Study, base: Path, records: Path, start: Path, arm: str, seed: int,
            overrides: Sequence[str]) -> Path:
    """The record of one arm and seed of `study`, run (or resumed) in
    ``base/<study.runs>/<arm>-seed<seed>`` from the SFT model `start`, then evaluated a last
    time if the study asks for it, unless it is recorded. A budget-matched arm needs the record
    of its reference's run of the seed."""
    name = run_name(arm, seed)
    if finished(records / name, study.record_files):
        return records / name
    directory = base / study.runs / name
    changes = [*ARMS[arm], *overrides, f"seed={seed}", f"init={start}", f"run_dir={directory}"]
    if arm in BUDGET_OF:
        schedule = budget_schedule_of_run(records / run_name(BUDGET_OF[arm], seed),
                                          load_config(TrainConfig, study.config).group_size)
        changes.append(f"credit_config.schedule={json.dumps(schedule)}")
    config = load_config(TrainConfig, study.config, changes)
    train(config, *initial_model(config), log=quiet)
    if study.final_samples and not (directory / FINAL_EVAL).exists():
        (directory / FINAL_EVAL).write_text(json.dumps(
            final_evaluation(config, study.final_samples), indent=2) + "\n")
    return record(directory, records / name, study.record_files)


def final_evaluation(config: TrainConfig, samples: int) -> dict[str, float]:
    """``eval/<mode>/<metric>`` of the final model of the run ``config.run_dir`` on its
    held-out tasks (`held_out`), greedy and with `samples` sampled episodes per task. The
    evaluation's seed is the config's, the same in every run, so the sampled episodes of two
    runs draw from the same random streams."""
    cfg, params, tokenizer = run_directories.load(config.run_dir)
    config = dataclasses.replace(
        config, chat=run_directories.stored_chat(config.run_dir),
        evaluation=dataclasses.replace(config.evaluation, samples=samples))
    slots = eval_slots(config.evaluation.tasks or MAX_SLOTS, samples)
    with EnvPool(config.env, slots, config.workers, config=dict(config.env_options)) as pool:
        return held_out(config, pool, params, cfg, tokenizer, run_env(config))


def record(run_dir: Path, destination: Path, files: Sequence[str] = RECORD) -> Path:
    """Copies a run's record, `files` (its config and metrics), to `destination`; returns
    it."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copyfile(run_dir / name, destination / name)
    return destination


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-seed{seed}"


def finished(run_dir: Path, files: Sequence[str] = RECORD) -> bool:
    """True if `run_dir` holds `files` of a run that has made all the updates its config asks
    for."""
    if not all((run_dir / name).exists() for name in files):
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


def run_start(run_dir: Path, start_success: float) -> float:
    """A run's held-out greedy success at update 0: its own evaluation before training
    (`eval_at_start`) if it made one, else `start_success` (its SFT start's)."""
    before = [row[SUCCESS] for row in read_metrics(run_dir) if row["step"] < 0 and SUCCESS in row]
    return before[0] if before else start_success


def auc(run_dir: Path, start_success: float) -> float:
    """A run's held-out greedy success averaged over its evaluations, update 0 (`run_start`)
    included."""
    return float(np.mean(curve(run_dir, run_start(run_dir, start_success))[1]))


def bootstrap_interval(values: np.ndarray, resamples: int = 10_000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of `values` [n]: the central `level` of
    the means of `resamples` draws of n of them with replacement (a numpy Generator seeded
    `seed`)."""
    draws = np.random.default_rng(seed).choice(values, size=(resamples, len(values)))
    tail = 50 * (1 - level)
    low, high = np.percentile(draws.mean(axis=1), [tail, 100 - tail])
    return float(low), float(high)


def paired_difference(values: Mapping[int, float], reference: Mapping[int, float]) -> dict:
    """`values` minus `reference` per seed over the seeds both have (at least one), their mean
    and its 95% `bootstrap_interval` over seeds."""
    seeds = sorted(set(values) & set(reference))
    differences = np.array([values[s] - reference[s] for s in seeds])
    return {"seeds": seeds, "differences": differences.tolist(),
            "mean": float(np.mean(differences)),
            "interval": list(bootstrap_interval(differences))}


def run_figures(run_dir: Path, start_success: float) -> dict[str, float]:
    """A powered run's figures: its `auc`; its final greedy and sampled success, and greedy
    success per task type (`FINAL_EVAL`); and averaged over its updates, the `PER_UPDATE`
    diagnostics it logged and its seconds per update (`UPDATE_SECONDS`: rollout, credit and
    learner)."""
    rows = read_metrics(run_dir, before_training=False)
    final = json.loads((run_dir / FINAL_EVAL).read_text())
    per_update = [key for key in rows[0] if key.startswith(PER_UPDATE)]
    return {"auc": auc(run_dir, start_success),
            **{k: v for k, v in final.items() if k.startswith(SUCCESS) or k == SAMPLED_SUCCESS},
            **{key: float(np.mean([r[key] for r in rows])) for key in per_update},
            UPDATE_SECONDS: float(np.mean([sum(r[f"time/{phase}_s"] for phase in UPDATE_PHASES)
                                           for r in rows]))}


def versus(figures: Mapping[int, dict], reference: Mapping[int, dict]) -> dict[str, dict]:
    """The `paired_difference` of each seed's AUC and final successes (`run_figures`) to
    `reference`'s, for each figure some seed of both has."""
    out = {}
    for key in dict.fromkeys(k for f in figures.values() for k in f):
        if key == "auc" or key.startswith("eval/"):
            ours = {seed: f[key] for seed, f in figures.items() if key in f}
            theirs = {seed: f[key] for seed, f in reference.items() if key in f}
            if set(ours) & set(theirs):
                out[key] = paired_difference(ours, theirs)
    return out


def summarize_powered(runs: dict[str, dict[int, Path]], start_success: float) -> dict:
    """Per arm: each seed's `run_figures` and their means over seeds, the paired differences
    to GRPO (`versus`), the curves (update 0: `run_start`) and ProVer's pooled diagnostics."""
    figures = {arm: {seed: run_figures(path, start_success) for seed, path in by_seed.items()}
               for arm, by_seed in runs.items()}
    out = {}
    for arm, by_seed in runs.items():
        ours = figures[arm]
        shared = [k for k in dict.fromkeys(k for f in ours.values() for k in f)
                  if all(k in f for f in ours.values())]
        curves = {seed: curve(path, run_start(path, start_success))
                  for seed, path in by_seed.items()}
        out[arm] = {
            "seeds": sorted(by_seed),
            "runs": {str(seed): f for seed, f in ours.items()},
            "means": {k: float(np.mean([f[k] for f in ours.values()])) for k in shared},
            "versus_grpo": versus(ours, figures.get("grpo", {})) if arm != "grpo" else {},
            "curves": {str(seed): {"updates": c[0], "success": c[1]}
                       for seed, c in curves.items()},
            **pooled([row for path in by_seed.values()
                      for row in read_metrics(path, before_training=False)]),
        }
    return out


def interval_cell(paired: dict | None) -> str:
    """A `paired_difference` as "mean [low, high]", or "-" without one."""
    if not paired:
        return "-"
    low, high = paired["interval"]
    return f"{paired['mean']:+.3f} [{low:+.3f}, {high:+.3f}]"


def powered_table(summary: dict, start_success: float) -> str:
    """The markdown tables of `summarize_powered`: the primary one (means over seeds, and the
    AUC's paired difference to GRPO with its 95% interval); the secondary figures' paired
    differences to GRPO (final greedy and sampled success, greedy success per task type); and
    the diagnostics (means over seeds of the means over updates; ProVer's pooled)."""
    def cell(s, key):
        value = s["means"].get(key, s.get(key))
        return "-" if value is None else f"{value:.3f}"

    header = ("| arm | seeds | AUC | AUC - GRPO (95% CI) | final greedy | final sampled "
              "| mixed groups |")
    lines = [f"SFT start: held-out greedy success {start_success:.3f}.", "", header,
             "|---|---|---|---|---|---|---|"]
    for arm, s in summary.items():
        lines.append(f"| {arm} | {len(s['seeds'])} | {cell(s, 'auc')} "
                     f"| {interval_cell(s['versus_grpo'].get('auc'))} | {cell(s, SUCCESS)} "
                     f"| {cell(s, SAMPLED_SUCCESS)} | {cell(s, 'success/mixed_groups')} |")
    task_types = list(dict.fromkeys(key.removeprefix(SUCCESS + "/") for s in summary.values()
                                    for key in s["means"] if key.startswith(SUCCESS + "/")))
    secondary = [SUCCESS, SAMPLED_SUCCESS, *(f"{SUCCESS}/{t}" for t in task_types)]
    lines += ["", "Paired difference to GRPO (95% CI over seeds):", "",
              "| arm | final greedy | final sampled | "
              + " | ".join(f"greedy {t}" for t in task_types) + " |",
              "|---|" + "---|" * len(secondary)]
    for arm, s in summary.items():
        if arm != "grpo":
            lines.append(f"| {arm} | " + " | ".join(interval_cell(s["versus_grpo"].get(key))
                                                    for key in secondary) + " |")
    reasons = list(dict.fromkeys(key for s in summary.values() for key in s["means"]
                                 if key.startswith("credit/vict/abstain/")))
    diagnostics = ["success/mixed_groups", "episode/count",
                   "credit/prover/extra_env_steps_fraction", UPDATE_SECONDS,
                   "credit/prover/acceptance_rate", "credit/prover/mean_delta",
                   "credit/vict/abstained", *reasons]
    lines += ["", "Diagnostics (means over updates and seeds; ProVer's pooled over proposals):",
              "", "| " + " | ".join(
                  ["arm", "mixed groups", "episodes / update", "ProVer extra env steps",
                   "s / update", "ProVer acceptance", "ProVer mean Δ", "VICT abstained",
                   *(f"abstained: {r.rsplit('/', 1)[1]}" for r in reasons)]) + " |",
              "|---|" + "---|" * len(diagnostics)]
    for arm, s in summary.items():
        lines.append(f"| {arm} | " + " | ".join(cell(s, key) for key in diagnostics) + " |")
    return "\n".join(lines)


def probe_figures(run_dir: Path) -> dict[str, float]:
    """A pivotal-testbed run's figures: its probe area (the mean of its choice-probe scores,
    the one before its first update included), its discrimination area (the mean over the
    same probes of p(take the goal object) - p(take a look-alike): the score mixes how often
    the policy takes any look-alike with whether it takes the right one, this only the
    latter), its first and last probe score and last probabilities of taking the goal object
    and a look-alike, its final sampled success if it recorded one (`FINAL_EVAL`), and
    averaged over its updates its `PIVOT_PER_UPDATE` diagnostics and seconds per update."""
    rows = read_metrics(run_dir)
    probes = [row for row in rows if PROBE in row]
    updates = [row for row in rows if row["step"] >= 0]
    final = (json.loads((run_dir / FINAL_EVAL).read_text())
             if (run_dir / FINAL_EVAL).exists() else {})
    per_update = [key for key in dict.fromkeys(k for r in updates for k in r)
                  if key.startswith(PIVOT_PER_UPDATE)]
    return {"probe_area": float(np.mean([row[PROBE] for row in probes])),
            DISCRIMINATION: float(np.mean([row["eval/probe/p_right_action"]
                                           - row["eval/probe/p_wrong_action"]
                                           for row in probes])),
            "probe_start": probes[0][PROBE], "probe_final": probes[-1][PROBE],
            **{f"{key}_final": probes[-1][f"eval/probe/{key}"]
               for key in ("p_right_action", "p_wrong_action")},
            **{k: v for k, v in final.items() if k == SAMPLED_SUCCESS},
            **{key: float(np.mean([r.get(key, 0.0) for r in updates])) for key in per_update},
            UPDATE_SECONDS: float(np.mean([sum(r[f"time/{phase}_s"] for phase in UPDATE_PHASES)
                                           for r in updates]))}


def paired_test(values: Mapping[int, float], reference: Mapping[int, float]) -> dict:
    """`paired_difference` with its tests: the one-sided paired t-test's p-value that the
    mean difference is above 0 (None under 2 seeds or with no spread), the seeds above 0 and
    the one-sided sign test's p-value over the seeds that differ (1 if none does)."""
    from scipy import stats

    paired = paired_difference(values, reference)
    differences = np.array(paired["differences"])
    spread = len(differences) > 1 and np.ptp(differences) > 0
    above, differ = int(np.sum(differences > 0)), int(np.sum(differences != 0))
    return {**paired,
            "t_p": float(stats.ttest_1samp(differences, 0.0, alternative="greater").pvalue)
            if spread else None,
            "above": above,
            "sign_p": float(stats.binomtest(above, differ, alternative="greater").pvalue)
            if differ else 1.0}


def holm(p_values: Mapping[str, float | None]) -> dict[str, float | None]:
    """Holm's step-down adjustment of a family of p-values (None: not tested, left out)."""
    tested = sorted((p, name) for name, p in p_values.items() if p is not None)
    adjusted: dict[str, float | None] = {name: None for name in p_values}
    running = 0.0
    for rank, (p, name) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[name] = running
    return adjusted


def separates(test: dict, alpha: float = 0.05) -> bool:
    """The pilot's rule: the paired difference is above 0 in every seed and its one-sided
    paired t-test gives p < `alpha`."""
    return all(d > 0 for d in test["differences"]) and test["t_p"] is not None \
        and test["t_p"] < alpha


def seeds_for_power(spread: float, effect: float, alpha: float = 0.05, power: float = 0.8,
                    most: int = 100) -> int | None:
    """The fewest seeds (2 or more) at which a one-sided paired t-test at level `alpha` detects
    a mean paired difference `effect` with probability `power`, when the differences' standard
    deviation is `spread` (noncentral t); None if `most` are not enough."""
    from scipy import stats

    for n in range(2, most + 1):
        df = n - 1
        critical = stats.t.ppf(1 - alpha, df)
        if stats.nct.sf(critical, df, effect / spread * np.sqrt(n)) >= power:
            return n
    return None


def summarize_pivot(runs: dict[str, dict[int, Path]], start_success: float) -> dict:
    """Per arm: each seed's `probe_figures` and their means over seeds, the probe area's and
    the final sampled success's `paired_test` against GRPO (the probe area's p-values also
    Holm-adjusted over the arms, ``t_p_holm``, and the pilot's `separates`), the probe curves
    and ProVer's pooled diagnostics. `start_success` is not used: each run probes its start."""
    del start_success
    figures = {arm: {seed: probe_figures(path) for seed, path in by_seed.items()}
               for arm, by_seed in runs.items()}
    reference = figures.get("grpo", {})
    out = {}
    for arm, by_seed in runs.items():
        ours = figures[arm]
        shared = [k for k in dict.fromkeys(k for f in ours.values() for k in f)
                  if all(k in f for f in ours.values())]
        tests = {}
        for key in ("probe_area", DISCRIMINATION, SAMPLED_SUCCESS):
            mine = {seed: f[key] for seed, f in ours.items() if key in f}
            theirs = {seed: f[key] for seed, f in reference.items() if key in f}
            if arm != "grpo" and set(mine) & set(theirs):
                tests[key] = paired_test(mine, theirs)
        out[arm] = {
            "seeds": sorted(by_seed), "runs": {str(seed): f for seed, f in ours.items()},
            "means": {k: float(np.mean([f[k] for f in ours.values()])) for k in shared},
            "versus_grpo": tests,
            "curves": {str(seed): {"updates": [row["step"] + 1 for row in rows],
                                   "probe": [row[PROBE] for row in rows]}
                       for seed, rows in ((seed, [r for r in read_metrics(path) if PROBE in r])
                                          for seed, path in by_seed.items())},
            **pooled([row for path in by_seed.values()
                      for row in read_metrics(path, before_training=False)]),
        }
    adjusted = holm({arm: s["versus_grpo"]["probe_area"]["t_p"] for arm, s in out.items()
                     if "probe_area" in s["versus_grpo"]})
    for arm, p in adjusted.items():
        area = out[arm]["versus_grpo"]["probe_area"]
        area["t_p_holm"] = p
        area["separates"] = separates(area)
    return out


def p_cell(p: float | None) -> str:
    return "-" if p is None else f"{p:.3f}"


def pivot_table(summary: dict, start_success: float) -> str:
    """The markdown tables of `summarize_pivot`: the primary one (probe area, its paired
    difference to GRPO with its 95% interval, the seeds above GRPO, the one-sided paired
    t-test's p-value raw and Holm-adjusted, the sign test's), the secondary one (final probe,
    probabilities of taking the goal object and a look-alike, the discrimination area and
    sampled success with their paired differences) and the diagnostics (means over updates
    and seeds; ProVer's pooled)."""
    del start_success

    def cell(s, key):
        value = s["means"].get(key, s.get(key))
        return "-" if value is None else f"{value:.3f}"

    lines = [("| arm | seeds | probe area | - GRPO (95% CI) | seeds above GRPO | t-test p "
              "| Holm p | sign test p |"), "|---|---|---|---|---|---|---|---|"]
    for arm, s in summary.items():
        area = s["versus_grpo"].get("probe_area") or {}
        above = f"{area['above']} of {len(area['differences'])}" if area else "-"
        lines.append(f"| {arm} | {len(s['seeds'])} | {cell(s, 'probe_area')} "
                     f"| {interval_cell(area)} | {above} | {p_cell(area.get('t_p'))} "
                     f"| {p_cell(area.get('t_p_holm'))} | {p_cell(area.get('sign_p'))} |")
    lines += ["", ("| arm | probe at start | final probe | p(take) goal object "
                   "| p(take) look-alike | discrimination area | - GRPO (95% CI) "
                   "| final sampled success | - GRPO (95% CI) |"),
              "|---|---|---|---|---|---|---|---|---|"]
    for arm, s in summary.items():
        lines.append(f"| {arm} | {cell(s, 'probe_start')} | {cell(s, 'probe_final')} "
                     f"| {cell(s, 'p_right_action_final')} | {cell(s, 'p_wrong_action_final')} "
                     f"| {cell(s, DISCRIMINATION)} "
                     f"| {interval_cell(s['versus_grpo'].get(DISCRIMINATION))} "
                     f"| {cell(s, SAMPLED_SUCCESS)} "
                     f"| {interval_cell(s['versus_grpo'].get(SAMPLED_SUCCESS))} |")
    parts = list(dict.fromkeys(key for s in summary.values() for key in s["means"]
                               if key.startswith("credit/mass/") and key != MASS_OUTCOME))
    diagnostics = ["success/rate", "success/mixed_groups", "episode/valid_actions",
                   "credit/prover/valid_proposals", "credit/prover/acceptance_rate",
                   "credit/prover/mean_delta", "credit/vict/abstained", *parts, UPDATE_SECONDS]
    lines += ["", "| arm | training success | mixed groups | valid actions "
              "| ProVer proposals / update | ProVer acceptance | ProVer mean Δ | VICT abstained | "
              + "".join(f"mass: {key.removeprefix('credit/mass/')} | " for key in parts)
              + "s / update |", "|---|" + "---|" * len(diagnostics)]
    for arm, s in summary.items():
        lines.append(f"| {arm} | " + " | ".join(cell(s, key) for key in diagnostics) + " |")
    return "\n".join(lines)


def plot(summary: dict, path: Path, curve: str, y_label: str) -> None:
    """The summary's `curve` series against updates, mean over seeds with each seed faint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.5, 4))
    for arm, s in summary.items():
        curves = list(s["curves"].values())
        line = ax.plot(curves[0]["updates"],
                       np.mean([c[curve] for c in curves], axis=0), label=arm)[0]
        for c in curves:
            ax.plot(c["updates"], c[curve], color=line.get_color(), alpha=0.2)
    ax.set_xlabel("updates")
    ax.set_ylabel(y_label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


STUDIES = {
    "first": Study(
        config=ROOT / "configs" / "household-small.yaml",
        sft_config=ROOT / "configs" / "sft" / "household-small.yaml",
        start=RESULTS / "runs" / "sft", runs="", records=RESULTS / "runs",
        arms=tuple(ARMS), seeds=(0, 1, 2), final_samples=0, summarize=summarize, table=table,
        summary=RESULTS / "compare.json", plot=ROOT / "docs" / "results-compare.png"),
    "powered": Study(
        config=ROOT / "configs" / "household-small-powered.yaml",
        sft_config=ROOT / "configs" / "sft" / "household-small-recovery2.yaml",
        start=RESULTS / "runs" / "sft-recovery2", runs="powered", records=RESULTS / "powered",
        arms=("grpo", "prover", "vict", "gigpo", "grpo-budget-matched"), seeds=(0, 1, 2, 3, 4),
        final_samples=4, summarize=summarize_powered, table=powered_table,
        summary=RESULTS / "powered.json", plot=ROOT / "docs" / "results-powered.png"),
    "pivot-pilot": Study(
        config=ROOT / "configs" / "household-pivot.yaml",
        sft_config=ROOT / "configs" / "sft" / "household-pivot-2.yaml",
        start=RESULTS / "runs" / "sft-pivot-2", runs="pivot-pilot",
        records=RESULTS / "pivot-pilot", arms=("grpo", "prover-oracle-judge", "oracle-progress"),
        seeds=(0, 1, 2), final_samples=0, summarize=summarize_pivot, table=pivot_table,
        summary=RESULTS / "pivot-pilot.json", plot=ROOT / "docs" / "results-pivot-pilot.png",
        curve="probe", y_label="choice probe (held-out)"),
    "pivot-pilot-marked": Study(
        config=ROOT / "configs" / "household-pivot-marked.yaml",
        sft_config=ROOT / "configs" / "sft" / "household-pivot-2.yaml",
        start=RESULTS / "runs" / "sft-pivot-2", runs="pivot-pilot-marked",
        records=RESULTS / "pivot-pilot-marked",
        arms=("grpo", "prover-oracle-judge", "oracle-progress"), seeds=(0, 1, 2),
        final_samples=0, summarize=summarize_pivot, table=pivot_table,
        summary=RESULTS / "pivot-pilot-marked.json",
        plot=ROOT / "docs" / "results-pivot-pilot-marked.png",
        curve="probe", y_label="choice probe (held-out)"),
    "asynchronous": Study(
        config=ROOT / "configs" / "household-small-powered.yaml",
        sft_config=ROOT / "configs" / "sft" / "household-small-recovery2.yaml",
        start=RESULTS / "runs" / "sft-recovery2", runs="powered", records=RESULTS / "powered",
        arms=("grpo", "grpo-async"), seeds=(0, 1, 2), final_samples=4,
        summarize=summarize_powered, table=powered_table,
        summary=RESULTS / "asynchronous.json", plot=ROOT / "docs" / "results-asynchronous.png"),
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", choices=list(STUDIES), default="first")
    parser.add_argument("--smoke", action="store_true", help="1-2 steps, nothing kept")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), help="default: the study's")
    parser.add_argument("--seeds", nargs="+", type=int, help="default: the study's")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: summarize the runs that have finished")
    parser.add_argument("--runs", type=Path, help="where the runs live (default: "
                        "experiments/runs, with --smoke a temporary folder)")
    parser.add_argument("--records", type=Path, help="where the records live (default: "
                        "the study's, with --smoke RUNS/records)")
    args = parser.parse_args(argv)
    study = STUDIES[args.study]
    chosen, seeds = args.arms or list(study.arms), args.seeds or list(study.seeds)
    with tempfile.TemporaryDirectory(prefix="compare-") as scratch:
        base = args.runs or (Path(scratch) if args.smoke else ROOT / "experiments" / "runs")
        records = args.records or (base / "records" if args.smoke else study.records)
        start_record = (study.start if records.resolve() == study.records
                        else records / study.start.name)
        arms = [*chosen, *(BUDGET_OF[a] for a in chosen
                           if a in BUDGET_OF and BUDGET_OF[a] not in chosen)]
        runs: dict[str, dict[int, Path]] = {arm: {} for arm in ARMS if arm in arms}
        if args.report:
            for seed in seeds:
                for arm in runs:
                    if finished(records / run_name(arm, seed), study.record_files):
                        runs[arm][seed] = records / run_name(arm, seed)
            runs = {arm: by_seed for arm, by_seed in runs.items() if by_seed}
        else:
            start = sft_start(study.sft_config, base / study.start.name, start_record,
                              SMOKE_SFT if args.smoke else [])
            with exit_when_interrupted():  # SIGTERM or Ctrl-C: the run saves, then it exits
                for seed in seeds:  # every arm's seed 0 first: a stopped comparison is one
                    for arm in runs:
                        runs[arm][seed] = run_arm(study, base, records, start, arm, seed,
                                                  SMOKE_RL if args.smoke else [])
        start_success = read_metrics(start_record)[-1][SUCCESS]
        summary = study.summarize(runs, start_success)
    print(study.table(summary, start_success))
    if not args.smoke:
        study.summary.parent.mkdir(parents=True, exist_ok=True)
        study.summary.write_text(json.dumps(
            {"start_success": start_success, "arms": summary}, indent=2) + "\n")
        plot(summary, study.plot, study.curve, study.y_label)


if __name__ == "__main__":
    main()
