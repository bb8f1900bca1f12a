"""`tpu.plan`'s learner memory against XLA's own accounting of the compiled train step.

For each setup (model shape, mesh on 8 CPU devices, remat, compute dtype, micro-batches) the
learner's train step is compiled for abstract inputs (nothing is run), and its memory analysis
gives the per-device peak XLA plans for: arguments + outputs - donated aliases + temporaries.
The planner's learner lines (params, optimizer, gradients, compute copy, gathered weights,
activations) are set beside it. The ratio is plan / XLA: above 1 the planner is conservative.

Usage: python bench/plan.py
Prints a table, writes bench/results/plan.json and updates bench/RESULTS.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax
import jax.numpy as jnp

from bench import report
from models import qwen
from prover_jax import Batch
from prover_jax.learner import Learner, LearnerConfig, TrainBatch
from tpu import plan
from tpu.mesh import MeshConfig, build_mesh

MiB = 2**20
LEARNER_LINES = ("params", "optimizer", "gradients", "compute copy", "gathered weights",
                 "activations")

SHAPES = {
    # the learner benchmark's cpu preset: a vocabulary-heavy 11M model
    "qwen3 d256 x4, V16000": qwen.QwenConfig(
        model_type="qwen3", vocab_size=16000, hidden_size=256, intermediate_size=768,
        num_layers=4, num_heads=4, num_kv_heads=2, head_dim=64, qk_norm=True),
    # layers dominate: a 26M model with a small vocabulary
    "qwen3 d512 x8, V4096": qwen.QwenConfig(
        model_type="qwen3", vocab_size=4096, hidden_size=512, intermediate_size=1536,
        num_layers=8, num_heads=8, num_kv_heads=4, head_dim=64, qk_norm=True),
}


class Setup(NamedTuple):
    shape: str
    mesh: MeshConfig
    remat: bool
    dtype: str
    micro_batches: int
    rows: int = 8
    length: int = 256


SETUPS = [Setup(shape, mesh, remat, dtype, 1)
          for shape in SHAPES
          for mesh in (MeshConfig(), MeshConfig(fsdp=8), MeshConfig(fsdp=4, model=2))
          for remat in (True, False)
          for dtype in ("float32", "bfloat16")] + [
    Setup("qwen3 d512 x8, V4096", MeshConfig(data=2, fsdp=4), True, "bfloat16", 2, rows=16)]


def compiled_peak(setup: Setup) -> float:
    """XLA's per-device peak of the compiled train step, bytes."""
    cfg = SHAPES[setup.shape]
    mesh = build_mesh(setup.mesh)
    learner = Learner(cfg, LearnerConfig(compute_dtype=setup.dtype, remat=setup.remat,
                                         micro_batches=setup.micro_batches, head_buckets=1),
                      mesh)
    grid = (setup.rows, setup.length)

    def spec(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    batch = Batch(spec(grid, jnp.int32), spec(grid, jnp.bool_), spec(grid, jnp.int32),
                  spec(grid[:1], jnp.int32), spec(grid[:1], jnp.float32),
                  spec((setup.rows, 1), jnp.bool_))
    train = TrainBatch(batch, spec(grid, jnp.float32), spec(grid, jnp.float32))
    memory = learner.compiled_step(None).lower(learner.abstract_state(), train).compile()
    stats = memory.memory_analysis()
    return float(stats.argument_size_in_bytes + stats.output_size_in_bytes
                 - stats.alias_size_in_bytes + stats.temp_size_in_bytes)


def planned(setup: Setup) -> float:
    """The planner's learner lines for the same setup, bytes per device."""
    work = plan.Workload(rows=setup.rows, micro_batches=setup.micro_batches, prompt=0,
                         response=setup.length, sampler_rows=setup.rows,
                         compute_dtype=setup.dtype, remat=setup.remat)
    lines = plan.plan(SHAPES[setup.shape], setup.mesh, jax.device_count(), work)
    return sum(lines[name] for name in LEARNER_LINES)


def run(setups=SETUPS) -> list[dict]:
    results = []
    for setup in setups:
        xla, ours = compiled_peak(setup), planned(setup)
        row = {"shape": setup.shape, "mesh": setup.mesh.describe(), "remat": setup.remat,
               "dtype": setup.dtype, "micro_batches": setup.micro_batches,
               "rows": setup.rows, "length": setup.length,
               "xla_mib": xla / MiB, "plan_mib": ours / MiB, "ratio": ours / xla}
        print(row, flush=True)
        results.append(row)
    return results


def table(results: list[dict]) -> str:
    header = ("| model | mesh | remat | compute | micro-batches | XLA peak MiB | plan MiB | "
              "plan / XLA |")
    lines = [header, "|---|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['shape']} | {r['mesh']} | {'yes' if r['remat'] else 'no'} | {r['dtype']} | "
              f"{r['micro_batches']} | {r['xla_mib']:.1f} | {r['plan_mib']:.1f} | "
              f"{r['ratio']:.2f} |" for r in results]
    return "\n".join(lines)


def main() -> None:
    results = run()
    body = table(results)
    print(body)
    report.write("plan", "Memory planner vs XLA's compiled train step (`bench/plan.py`)",
                 report.machine(), body, results)


if __name__ == "__main__":
    main()
