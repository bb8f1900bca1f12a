"""Plots of a training run's metrics: ``python -m prover_jax.plot RUN_DIR``.

Reads ``RUN_DIR/metrics.jsonl`` and writes PNGs to ``RUN_DIR/plots/``:

- ``training.png``: those of reward, success rate, the SFT losses, KL to the reference and to
  the sampler, entropy and gradient norm that the run logs, against the step;
- ``eval.png``: the held-out evaluations (``eval/...``), one panel each;
- ``credit.png``: every diagnostic of the run's credit method (``credit/...``), a histogram's
  bins or a count's reasons as the lines of one panel;
- ``time.png``: seconds per step by phase (rollout, credit, learner, checkpoint).

The trainer and `prover_jax.sft` redraw them at the end of a run; this command redraws them at
any time, e.g. while a run is going.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

TRAINING = (("reward/mean", "reward"), ("success/rate", "success rate"),
            ("sft/nll", "NLL (train batch)"), ("sft/heldout_nll", "NLL (held out)"),
            ("learner/kl", "KL to the reference"), ("learner/behaviour_kl", "KL to the sampler"),
            ("learner/entropy", "entropy"), ("learner/grad_norm", "gradient norm"))
# Metric families drawn each into its own figure: (key prefix, title).
FAMILIES = (("eval", "held-out evaluation"), ("credit", "credit diagnostics"),
            ("time", "seconds per step"))


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The run's metric rows, in step order (one per step; a resumed run's last line wins)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics (is {run_dir} a run directory?)")
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["step"]] = row
    return [rows[step] for step in sorted(rows)]


def panel_of(name: str) -> tuple[str, str]:
    """(panel, series) of a metric named within its family.

    Series that differ only in their last path part (``vict/abstain/budget``) or in a bracketed
    bin (``prover/delta_hist[0,0.25)``) share a panel; any other metric has a panel of its own.
    """
    if "[" in name:
        stem, _, rest = name.partition("[")
        return stem, "[" + rest
    if name.count("/") >= 2:
        stem, _, series = name.rpartition("/")
        return stem, series
    return name, ""


def _panels(figure_path: Path, rows: list[dict],
            panels: Sequence[tuple[str, Sequence[tuple[str, str]]]], title: str) -> Path:
    """Draws one panel per (title, [(metric key, series label), ...]) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    columns = min(3, len(panels))
    lines = math.ceil(len(panels) / columns)
    height = 2.6 * lines + 0.7
    figure, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, height), squeeze=False)
    for ax, (label, series) in zip(axes.flat, panels):
        for key, name in series:
            points = [(r["step"], r[key]) for r in rows if key in r]
            if points:
                ax.plot(*zip(*points), marker="o" if len(points) < 30 else None, markersize=3,
                        label=name or None)
        if len(series) > 1:
            ax.legend(fontsize=6, loc="best")
        # an explicit title height spares matplotlib's search for overlapping axes
        ax.set_title(label, fontsize=10, y=1.0)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    figure.suptitle(title, fontsize=11)
    # fixed margins: tight_layout measures every tick label, seconds for a few dozen panels
    figure.subplots_adjust(left=0.07, right=0.98, wspace=0.3, hspace=0.6,
                           top=1 - 0.75 / height, bottom=0.45 / height)
    figure_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(figure_path, dpi=110)
    plt.close(figure)
    return figure_path


def plot_run(run_dir: str | Path) -> list[Path]:
    """Draws the run's plots into ``run_dir/plots``; returns the files written."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    keys = sorted({k for r in rows for k in r})
    out = run_dir / "plots"
    training = [(label, [(k, "")]) for k, label in TRAINING if k in keys]
    written = [_panels(out / "training.png", rows, training, f"training: {run_dir.name}")]
    for prefix, title in FAMILIES:
        family: dict[str, list[tuple[str, str]]] = {}
        for key in keys:
            if key.startswith(f"{prefix}/"):
                panel, series = panel_of(key.removeprefix(f"{prefix}/"))
                family.setdefault(panel, []).append((key, series))
        if family:
            written.append(_panels(out / f"{prefix}.png", rows, list(family.items()), title))
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a training run directory (with metrics.jsonl)")
    args = parser.parse_args(argv)
    try:
        for path in plot_run(args.run_dir):
            print(path)
    except FileNotFoundError as e:
        parser.error(str(e))


if __name__ == "__main__":
    main()
