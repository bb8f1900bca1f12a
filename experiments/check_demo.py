"""Whether a run of the main job (`make demo`) reproduces its committed record:
``python experiments/check_demo.py RUN_DIR``.

The demo is deterministic, and README quotes its figures from the record
(``experiments/results/runs/demo/``: its config, metrics and sampled credit). CI runs this after
`make demo`, so a change that moves the demo's figures fails until the record (and so README)
is updated: ``cp RUN_DIR/{config.json,metrics.jsonl,samples.jsonl} experiments/results/runs/demo/``.
Wall-clock seconds and the run directory's name may differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "experiments" / "results" / "runs" / "demo"
FILES = ("config.json", "metrics.jsonl", "samples.jsonl")


def contents(run_dir: Path, name: str) -> list:
    """A record file as JSON values (one per line for JSONL), without what may differ: wall-clock
    seconds and the run directory."""
    text = (run_dir / name).read_text()
    values = [json.loads(text)] if name.endswith(".json") else [
        json.loads(line) for line in text.splitlines() if line.strip()]
    return [{k: v for k, v in value.items()
             if not (k.startswith("time/") or k.endswith("wall_s") or k == "run_dir")}
            for value in values]


def differences(run_dir: Path, record: Path = RECORD) -> list[str]:
    """Where `run_dir` departs from `record`: per file, the first differing entry."""
    found = []
    for name in FILES:
        if not (run_dir / name).exists():
            found.append(f"{run_dir / name} is missing")
            continue
        ours, theirs = contents(run_dir, name), contents(record, name)
        for index, (mine, recorded) in enumerate(zip(ours, theirs)):
            if mine != recorded:
                keys = sorted(k for k in set(mine) | set(recorded)
                              if mine.get(k) != recorded.get(k))
                found.append(f"{name}, entry {index}: {', '.join(keys[:5])} differ "
                             f"(e.g. {keys[0]}: {recorded.get(keys[0])!r} recorded, "
                             f"{mine.get(keys[0])!r} now)")
                break
        else:
            if len(ours) != len(theirs):
                found.append(f"{name}: {len(ours)} entries, {len(theirs)} recorded")
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    found = differences(parser.parse_args(argv).run_dir)
    if found:
        print("the demo departs from its record (experiments/results/runs/demo):\n  "
              + "\n  ".join(found), file=sys.stderr)
        sys.exit(1)
    print("the demo reproduces its record (experiments/results/runs/demo)")


if __name__ == "__main__":
    main()
