"""Shared output of the benchmarks: a JSON file per script and a section of bench/RESULTS.md."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def best_seconds(fn, repeats: int) -> float:
    """The fastest of ``repeats`` timings of ``fn()`` (which must block until its work is done).

    The minimum, not the mean: other processes share the machine and only ever add time.
    """
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def machine() -> str:
    """This machine in a few words, for the results' header."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"


def write(name: str, title: str, machine: str, body: str, results) -> None:
    """Writes bench/results/NAME.json and replaces the NAME section of bench/RESULTS.md.

    The section lies between `<!-- NAME:begin -->` and `<!-- NAME:end -->`; text outside the
    markers (notes on reading the numbers) is kept.
    """
    out = BENCH / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    path = BENCH / "RESULTS.md"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = f"{begin}\n## {title}\n\nMachine: {machine}.\n\n{body}\n{end}"
    current = path.read_text() if path.exists() else "# Benchmark results\n"
    if begin in current:
        head, rest = current.split(begin, 1)
        current = head + section + rest.split(end, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(current)
