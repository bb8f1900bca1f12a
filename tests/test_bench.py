"""The kernel benchmark at a tiny length: every pipeline runs and matches the reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def load_bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "credit_kernels.py"
    spec = importlib.util.spec_from_file_location("credit_kernels_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_credit_kernel_bench_runs_and_agrees():
    bench = load_bench()
    results = bench.run([128], repeats=1, ref_repeats=1)  # asserts ours == reference inside
    methods = {r["method"] for r in results[1:]}
    assert methods == set(bench.READS)
    assert all(r["ours_ms"] > 0 and r["floor_ms"] > 0 for r in results[1:])
    assert "| vict | 128 |" in bench.table(results)
