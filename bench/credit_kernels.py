"""Credit kernels at paper scale vs a per-row numpy reference and the memory-bandwidth floor.

Batch: 16 groups x 8 rollouts = 128 rows, up to 50 turns (T bucket 64), 12 VICT atoms, and
sequence lengths L = 4k, 16k, 32k tokens. Each method runs end to end, from the batch arrays and
its inputs to token advantages `[B, L]`, as one jitted call (compiled once before timing). The
reference is `tests/reference.py`: loops over rows, groups and turns in Python with numpy inside a
row, the way public reference implementations compute advantages.

The floor is the bytes the method must read and write (its inputs plus the `[B, L]` output) over
the machine's large-copy bandwidth, measured in the same run (the faster of `numpy.copyto` and a
jitted elementwise pass over 256 MiB).

Usage: python bench/credit_kernels.py [--lengths 4096 16384 32768] [--repeats 20]
Prints a table, writes bench/results/credit_kernels.json and updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from prover_jax import credit  # noqa: E402
from tests import reference as ref  # noqa: E402
from vict_jax import redistribute  # noqa: E402

GROUPS, GROUP_SIZE, MAX_TURNS, T_BUCKET, ATOMS = 16, 8, 50, 64, 12


def make_inputs(seq_len: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A paper-scale batch: every row a multi-turn conversation filling 50-100% of L."""
    rng = np.random.default_rng(seed)
    b = GROUPS * GROUP_SIZE
    n_turns = rng.integers(MAX_TURNS // 2, MAX_TURNS + 1, b)
    lengths = rng.integers(seq_len // 2, seq_len + 1, b)
    pos = np.arange(seq_len)[None, :]
    turn = pos * n_turns[:, None] // lengths[:, None]
    turn_start = -(-turn * lengths[:, None] // n_turns[:, None])
    turn_len = lengths[:, None] // n_turns[:, None]
    policy = (pos < lengths[:, None]) & (pos - turn_start >= 0.7 * turn_len)
    rewards = (rng.random(b) < 0.3).astype(np.float32)
    group_ids = np.repeat(np.arange(GROUPS), GROUP_SIZE).astype(np.int32)
    turn_valid = np.arange(T_BUCKET)[None, :] < n_turns[:, None]
    start = rng.integers(0, n_turns - 1)
    return {
        "tokens": rng.integers(0, 150_000, (b, seq_len)).astype(np.int32),
        "loss_mask": policy,
        "turn_ids": np.where(policy, turn, -1).astype(np.int32),
        "group_ids": group_ids,
        "rewards": rewards,
        "turn_valid": turn_valid,
        "seg_start": start.astype(np.int32),
        "seg_end": np.minimum(start + rng.integers(0, 4, b), n_turns - 1).astype(np.int32),
        "delta": np.where(rng.random(b) < 0.1, rng.random(b), 0).astype(np.float32),
        "anchor_ids": (group_ids[:, None] * 40 + rng.integers(0, 40, (b, T_BUCKET))
                       ).astype(np.int32),
        "boundary_values": rng.random((b, 2)).astype(np.float32),
        "applies": rng.random(b) < 0.15,
        "labels": rng.integers(-1, 2, (b, T_BUCKET)).astype(np.int32),
        "labelled": np.repeat(rng.random(GROUPS) < 0.5, GROUP_SIZE),
        "logprobs": np.log(rng.random((b, seq_len))).astype(np.float32),
        "marginals": (rng.choice([0, 0, 1], (b, ATOMS)) * rng.normal(size=(b, ATOMS))
                      ).astype(np.float32),
        "eligible": rng.random((b, ATOMS)) < 0.9,
        "omega": ((rng.random((b, T_BUCKET, ATOMS)) < 0.05) * turn_valid[:, :, None]
                  ).astype(np.float32),
    }


def pipelines(k: SimpleNamespace) -> dict:
    """Each method end to end, from the batch arrays to `[B, L]`, through the namespace `k` of
    kernels (ours, or the reference's functions of the same names)."""

    def tokens(values, x):
        return k.to_tokens(values, x["turn_ids"], x["loss_mask"])

    def grpo(x):
        return tokens(k.grpo(x["rewards"], x["group_ids"]), x)

    def prover(x):
        base = k.grpo(x["rewards"], x["group_ids"])
        return tokens(k.prover(base, x["turn_valid"], x["seg_start"], x["seg_end"],
                               x["delta"]), x)

    def gigpo(x):
        return tokens(k.gigpo(x["rewards"], x["group_ids"], x["anchor_ids"], x["turn_valid"]), x)

    def spo_chain(x):
        base = k.grpo(x["rewards"], x["group_ids"])
        return tokens(k.spo_chain(base, x["rewards"], x["group_ids"], x["turn_valid"],
                                  x["boundary_values"], x["applies"]), x)

    def criticsearch(x):
        base = k.grpo(x["rewards"], x["group_ids"])
        return tokens(k.criticsearch(base, x["group_ids"], x["turn_valid"], x["labels"],
                                     x["labelled"]), x)

    def vict(x):
        base = k.grpo(x["rewards"], x["group_ids"], "std")
        return tokens(k.vict(base, x["marginals"], x["eligible"], x["omega"], x["turn_valid"],
                             x["group_ids"]), x)

    def high_prob(x):
        return k.high_prob_mask(x["logprobs"], x["loss_mask"])

    return {"grpo": grpo, "prover": prover, "gigpo": gigpo, "spo-chain": spo_chain,
            "criticsearch": criticsearch, "vict": vict, "high-prob-mask": high_prob}


KERNELS = SimpleNamespace(
    grpo=credit.grpo, prover=credit.prover, gigpo=credit.gigpo, spo_chain=credit.spo_chain,
    criticsearch=credit.criticsearch, to_tokens=credit.to_tokens,
    high_prob_mask=credit.high_prob_mask,
    vict=lambda *args: redistribute(*args).advantages)
REFERENCE = SimpleNamespace(
    grpo=ref.grpo, prover=ref.prover, gigpo=ref.gigpo, spo_chain=ref.spo_chain,
    criticsearch=ref.criticsearch, to_tokens=ref.to_tokens, high_prob_mask=ref.high_prob_mask,
    vict=lambda *args: ref.vict_redistribute(*args)[0])


READS = {
    "grpo": ("rewards", "group_ids", "loss_mask"),  # per-trajectory: no turn_ids gather
    "prover": ("rewards", "group_ids", "turn_valid", "seg_start", "seg_end", "delta",
               "turn_ids", "loss_mask"),
    "gigpo": ("rewards", "group_ids", "anchor_ids", "turn_valid", "turn_ids", "loss_mask"),
    "spo-chain": ("rewards", "group_ids", "turn_valid", "boundary_values", "applies",
                  "turn_ids", "loss_mask"),
    "criticsearch": ("rewards", "group_ids", "turn_valid", "labels", "labelled", "turn_ids",
                     "loss_mask"),
    "vict": ("rewards", "group_ids", "marginals", "eligible", "omega", "turn_valid",
             "turn_ids", "loss_mask"),
    "high-prob-mask": ("logprobs", "loss_mask"),
}


def timed(fn, repeats: int, rounds: int = 3) -> float:
    """Seconds per call: the best of `rounds` medians over `repeats` samples of 3 calls each,
    after `rounds` warm-up calls. The best round discounts other tenants of a shared machine."""
    for _ in range(rounds):
        jax.block_until_ready(fn())
    medians = []
    for _ in range(rounds):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(3):
                jax.block_until_ready(fn())
            samples.append((time.perf_counter() - start) / 3)
        medians.append(statistics.median(samples))
    return min(medians)


def copy_bandwidth(n_bytes: int = 1 << 28, repeats: int = 5, rounds: int = 3) -> float:
    """Bytes per second moved (read + written) by a large copy: the better of a numpy copy and
    an XLA elementwise pass, since XLA:CPU streams with every core and numpy with one."""
    src = np.ones(n_bytes // 4, np.float32)
    dst = np.empty_like(src)
    numpy_s = timed(lambda: np.copyto(dst, src), repeats, rounds)
    device_src = jnp.asarray(src)
    add_one = jax.jit(lambda x: x + 1.0)
    jax.block_until_ready(add_one(device_src))
    xla_s = timed(lambda: add_one(device_src), repeats, rounds)
    return 2 * n_bytes / min(numpy_s, xla_s)


def run(lengths, repeats: int, ref_repeats: int, rounds: int = 3) -> list[dict]:
    """Every pipeline at each length, checked against the reference, then timed (`timed`)."""
    bandwidth = copy_bandwidth(repeats=repeats, rounds=rounds)
    ours, reference = pipelines(KERNELS), pipelines(REFERENCE)
    rows = []
    for seq_len in lengths:
        x_np = make_inputs(seq_len)
        x_dev = {k: jnp.asarray(v) for k, v in x_np.items()}
        for name, fn in ours.items():
            jitted = jax.jit(fn)
            out = jax.block_until_ready(jitted(x_dev))
            expected = reference[name](x_np)
            np.testing.assert_allclose(np.asarray(out, np.float32),
                                       np.asarray(expected, np.float32), atol=1e-4)
            t_ours = timed(lambda f=jitted, x=x_dev: f(x), repeats, rounds)
            t_ref = timed(lambda f=reference[name], x=x_np: f(x), ref_repeats, rounds)
            n_bytes = sum(x_np[k].nbytes for k in READS[name]) + np.asarray(out).nbytes
            floor = n_bytes / bandwidth
            rows.append({"method": name, "seq_len": seq_len, "ours_ms": 1e3 * t_ours,
                         "reference_ms": 1e3 * t_ref, "speedup": t_ref / t_ours,
                         "bytes": n_bytes, "floor_ms": 1e3 * floor,
                         "vs_floor": t_ours / floor})
    return [{"copy_bandwidth_gb_s": bandwidth / 1e9}] + rows


def table(results: list[dict]) -> str:
    lines = [(f"large-copy bandwidth: {results[0]['copy_bandwidth_gb_s']:.2f} GB/s "
              "(read + written)"), "",
             ("| method | L | ours (ms) | per-row reference (ms) | speedup | floor (ms) | "
              "ours / floor |"),
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results[1:]:
        lines.append(f"| {r['method']} | {r['seq_len']} | {r['ours_ms']:.2f} | "
                     f"{r['reference_ms']:.1f} | {r['speedup']:.0f}x | {r['floor_ms']:.2f} | "
                     f"{r['vs_floor']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384, 32768])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--ref-repeats", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    results = run(args.lengths, args.repeats, args.ref_repeats)
    text = table(results)
    print(text)
    if args.no_write:
        return
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
               f"jax {jax.__version__} on {jax.default_backend()}")
    report.write("credit_kernels", "Credit kernels (`bench/credit_kernels.py`)", machine, text,
                 results)


if __name__ == "__main__":
    main()
