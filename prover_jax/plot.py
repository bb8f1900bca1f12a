"""Plots of a training run's metrics: ``python -m prover_jax.plot RUN_DIR``.

Reads ``RUN_DIR/metrics.jsonl`` and writes PNGs to ``RUN_DIR/plots/``:

- ``training.png``: those of reward, success rate, the SFT losses, KL to the reference and to
  the sampler, entropy and gradient norm that the run logs, against the step;
- ``eval.png``: the held-out evaluations (``eval/...``), one panel each;
- ``credit-<method>.png``: the diagnostics of each credit method the run logs
  (``credit/prover/...``, ``credit/vict/...``, ``credit/gigpo/...``), a histogram's bins or a
  count's reasons as the lines of one panel;
- ``time.png``: seconds per step by phase (rollout, credit, learner, checkpoint).

A series that stays at one value over several steps is not drawn (a figure's title counts
them), and tick labels are plain numbers, never an offset.

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
FAMILIES = (("eval", "held-out evaluation"), ("time", "seconds per step"))
CREDIT = "credit"


def read_metrics(run_dir: str | Path, before_training: bool = True) -> list[dict]:
    """The run's metric rows, in step order (one per step; a resumed run's last line wins),
    with the evaluation before the first update (step -1, `eval_at_start`) unless
    ``before_training`` is False."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics (is {run_dir} a run directory?)")
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["step"]] = row
    return [rows[step] for step in sorted(rows) if before_training or step >= 0]


def panel_of(name: str) -> tuple[str, str]:
    """(panel, series) of a metric named within its family.

    Series that differ only in their last path part (``abstain/budget``) or in a bracketed bin
    (``delta_hist[0,0.25)``) share a panel; any other metric has a panel of its own.
    """
    if "[" in name:
        stem, _, rest = name.partition("[")
        return stem, "[" + rest
    if "/" in name:
        stem, _, series = name.rpartition("/")
        return stem, series
    return name, ""


def constant(rows: list[dict], key: str) -> bool:
    """True if ``key`` was logged at two steps or more, always with one value."""
    values = [r[key] for r in rows if key in r]
    return len(values) > 1 and all(v == values[0] for v in values)


def _panels(figure_path: Path, rows: list[dict],
            panels: Sequence[tuple[str, Sequence[tuple[str, str]]]], title: str) -> Path | None:
    """Draws one panel per (title, [(metric key, series label), ...]) into a PNG, leaving out
    constant series and panels left empty; None (no file) when nothing is left."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    keys = {key for _, series in panels for key, _ in series}
    flat = {key for key in keys if constant(rows, key)}
    panels = [(label, kept) for label, series in panels
              if (kept := [(key, name) for key, name in series if key not in flat])]
    if not panels:
        return None
    if flat:
        title = f"{title} ({len(flat)} constant, not drawn)"
    columns = min(3, len(panels))
    lines = math.ceil(len(panels) / columns)
    height = 2.6 * lines + 0.7
    figure, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, height), squeeze=False)
    for ax, (label, series) in zip(axes.flat, panels):
        for key, name in series:
            points = [(r["step"], r[key]) for r in rows if key in r]
            ax.plot(*zip(*points), marker="o" if len(points) < 30 else None, markersize=3,
                    label=name or None)
        if len(series) > 1:
            ax.legend(fontsize=6, loc="best")
        # an explicit title height spares matplotlib's search for overlapping axes
        ax.set_title(label, fontsize=10, y=1.0)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False)
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


def _grouped(keys: Sequence[str], prefix: str, group: bool = True
             ) -> list[tuple[str, list[tuple[str, str]]]]:
    """The panels of the metrics under ``prefix/``: (title, [(key, series label), ...]); with
    ``group``, series of one panel (`panel_of`) share it."""
    panels: dict[str, list[tuple[str, str]]] = {}
    for key in keys:
        if key.startswith(f"{prefix}/"):
            name = key.removeprefix(f"{prefix}/")
            panel, series = panel_of(name) if group else (name, "")
            panels.setdefault(panel, []).append((key, series))
    return list(panels.items())


def plot_run(run_dir: str | Path) -> list[Path]:
    """Draws the run's plots into ``run_dir/plots``; returns the files written."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    keys = sorted({k for r in rows for k in r})
    out = run_dir / "plots"
    figures = [("training", [(label, [(k, "")]) for k, label in TRAINING if k in keys],
                f"training: {run_dir.name}")]
    figures += [(prefix, _grouped(keys, prefix, group=False), title)
                for prefix, title in FAMILIES]
    methods = sorted({k.split("/")[1] for k in keys if k.startswith(f"{CREDIT}/")})
    figures += [(f"{CREDIT}-{method}", _grouped(keys, f"{CREDIT}/{method}"),
                 f"{method} diagnostics") for method in methods]
    drawn = (_panels(out / f"{name}.png", rows, panels, title)
             for name, panels, title in figures if panels)
    return [path for path in drawn if path is not None]


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
