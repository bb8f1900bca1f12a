"""Learner, sampler and trainer throughput on one accelerator, with MFU against the chip's peak.

One prepared run (under 8 minutes on one TPU or GPU chip) on a Qwen3-0.6B-shaped model
(`tpu.plan.PRESETS["qwen3-0.6b"]`) with random weights:

- learner: `prover_jax.learner.Learner.train_step` (PPO-clip + AdamW, bf16 compute, remat) on a
  batch built as `bench/learner.py` builds it (a 32-token prompt, then turns of 48 policy and 16
  observation tokens; old log-probabilities 0, which changes no work): tokens/s over the best
  of a few steps after a compiling one. The rows are the most of `Setup.learner_rows` whose
  learner memory `tpu.plan` fits on the chip next to the script's own float32 params.
  MFU: `tpu.roofline.train_flops` without remat (model FLOPs, the LM head on the trained tokens
  as the step runs it) over the step time and the chip's peak; HFU counts remat's extra
  forward pass too.
- decode: `models.qwen.sampler.generate` from a fresh `kv_cache.empty` cache at 64, 128 and 256
  rows, a 64-token prompt and 128 new tokens at temperature 1 (a random model never samples
  the stop token, so every row decodes to the end). Decode time is the time of N new tokens
  less that of 1 (the prefill and the first token), same compiled program, after a compiling
  warm-up, so neither prefill nor compiles count. "of roofline": `tpu.roofline.roofline` of a
  step (weights and the whole cache read once, as attention reads every slot) over the
  measured step.
- trainer: `prover_jax.train` for 2 steps on household-small (GRPO; 2 groups of 4 episodes of
  up to 4 actions, replies of up to 16 tokens) with the same model and a tokenizer trained on
  the environment's texts (ids beyond it decode to nothing); per step the rollout / credit /
  learner / checkpoint seconds it writes to its run directory's `metrics.jsonl` (`time/*_s`).
  Step 0 includes its compiles; step 1 only those of new shapes. The last step always
  checkpoints; the run directory is in /dev/shm where that has room (`run_parent`).

The chip comes from `jax.devices()[0].device_kind` (`tpu.roofline.detect`); on an unknown one
there is no MFU or roofline, and the learner rows fit the device's reported memory (the
smallest candidate when it reports none). On CPU, or with --tiny, everything runs at tiny
shapes on the trainer's tiny model (a CI check that the script works, not a measurement;
--tiny also compiles at LLVM's optimisation level 0, as the tests do).

Usage: python bench/device.py [--tiny] [--out DIR]
Prints a table and writes DIR/device.json (default bench/results); RESULTS.md is not touched.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402

PRESET = "qwen3-0.6b"
ENV = "household-small"
PHASES = ("rollout", "credit", "learner", "checkpoint")


class Setup(NamedTuple):
    """The shapes of one run."""

    tiny: bool  # the trainer's tiny model instead of PRESET
    compute_dtype: str  # learner compute and sampler dtype
    remat: bool
    learner_rows: tuple[int, ...]  # candidates, most first: the first whose plan fits
    length: int
    repeats: int  # timed repeats (best kept)
    decode_rows: tuple[int, ...]
    prompt: int
    new_tokens: int
    trainer: dict  # TrainConfig fields


DEVICE = Setup(False, "bfloat16", True, (32, 16, 8, 4), 1024, 3, (64, 128, 256), 64, 128,
               dict(groups=2, group_size=4, max_actions=4, workers=2, max_new_tokens=16))
TINY = Setup(True, "float32", False, (4,), 64, 2, (8,), 8, 64,
             dict(groups=1, group_size=2, max_actions=1, workers=1, max_new_tokens=4))


def chip():
    """(device kind, `tpu.roofline.Chip` or None) of the first device."""
    import jax

    from tpu import roofline

    kind = jax.devices()[0].device_kind
    return kind, roofline.detect(kind)


def device_memory(found) -> int | None:
    """Bytes of memory of the first device: the chip's published HBM, else what the device
    reports, else None."""
    import jax

    if found is not None:
        return found.hbm_bytes
    return (jax.devices()[0].memory_stats() or {}).get("bytes_limit")


def build_model(setup: Setup):
    """(cfg, float32 params, tokenizer): PRESET with random weights and a tokenizer trained on
    ENV's texts, or with `setup.tiny` the trainer's tiny model."""
    import jax

    import envs
    from models import qwen
    from prover_jax import trainer
    from prover_jax.run_settings import TinyModel
    from tpu import plan

    env = envs.make(ENV)
    if setup.tiny:
        return trainer.tiny(env, TinyModel())
    tokenizer = trainer.tiny_tokenizer(trainer.environment_texts(env))
    cfg = plan.model_config(PRESET)
    return cfg, qwen.init(cfg, jax.random.key(0)), tokenizer


def learner_rows(cfg, setup: Setup, memory: int | None) -> int:
    """The most rows of `setup.learner_rows` whose `tpu.plan.LEARNER_LINES` (state, gradients,
    compute copy, activations) fit `tpu.plan.HEADROOM` of `memory` bytes."""
    from tpu import plan
    from tpu.mesh import MeshConfig

    if memory is None:
        return setup.learner_rows[-1]
    for rows in setup.learner_rows:
        work = plan.Workload(rows=rows, micro_batches=1, prompt=setup.length, response=0,
                             sampler_rows=1, compute_dtype=setup.compute_dtype,
                             remat=setup.remat)
        lines = plan.plan(cfg, MeshConfig(), 1, work)
        if sum(lines[k] for k in plan.LEARNER_LINES) <= plan.HEADROOM * memory:
            return rows
    return setup.learner_rows[-1]


def train_batch(cfg, rows: int, length: int):
    """tokens int32 [B, L], loss_mask bool [B, L], advantages float32 [B, L] (one value per
    row), as `bench/learner.py` builds them."""
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, (rows, length)).astype(np.int32)
    position = np.arange(length)
    loss_mask = np.broadcast_to((position >= 32) & ((position - 32) % 64 < 48),
                                (rows, length)).copy()
    advantages = (rng.normal(0, 1, (rows, 1)) * loss_mask).astype(np.float32)
    return tokens, loss_mask, advantages


def learner_config(setup: Setup):
    """The LearnerConfig of the learner measurement and of the trainer (one compiled setup,
    `prover_jax.learner.step`, so the trainer's state initialisation is not compiled again)."""
    from prover_jax.learner import LearnerConfig, OptimizerConfig

    return LearnerConfig(optimizer=OptimizerConfig(learning_rate=1e-5),
                         compute_dtype=setup.compute_dtype, remat=setup.remat)


def measure_learner(cfg, params, setup: Setup, found, memory: int | None) -> dict:
    """The train step's seconds, tokens/s, and with a known chip MFU and HFU."""
    import jax
    import jax.numpy as jnp

    from prover_jax import Batch
    from prover_jax.learner import Learner, TrainBatch, head_positions
    from tpu import roofline

    kept = sum(x.nbytes for x in jax.tree.leaves(params))  # the script's copy, besides the state
    rows = learner_rows(cfg, setup, None if memory is None else memory - kept)
    length = setup.length
    learner = Learner(cfg, learner_config(setup))
    state = learner.init(params)
    tokens, loss_mask, advantages = train_batch(cfg, rows, length)
    old = jnp.zeros((rows, length), jnp.float32)  # the step's work does not depend on them
    batch = Batch(tokens, loss_mask, loss_mask.astype("int32") - 1, jnp.zeros(rows, "int32"),
                  jnp.zeros(rows, "float32"), jnp.ones((rows, 1), bool))
    train = TrainBatch(batch, advantages, old)
    box = [state]

    def step():
        box[0], metrics = learner.train_step(box[0], train)
        jax.block_until_ready((box[0], metrics))

    start = time.perf_counter()
    step()
    compile_s = time.perf_counter() - start
    step_s = report.best_seconds(step, setup.repeats)
    head = rows * (head_positions(train, learner.cfg.head_buckets) or length)
    model_flops = roofline.train_flops(cfg, rows, length, remat=False, head_tokens=head)
    hardware_flops = roofline.train_flops(cfg, rows, length, setup.remat, head_tokens=head)
    return {"rows": rows, "length": length, "remat": setup.remat, "step_s": step_s,
            "compile_s": compile_s, "tokens_per_s": rows * length / step_s,
            "model_tflops": model_flops / 1e12,
            "mfu": None if found is None else roofline.mfu(model_flops, step_s, found),
            "hfu": None if found is None else roofline.mfu(hardware_flops, step_s, found)}


def decode_seconds(weights, cfg, rows: int, setup: Setup) -> float:
    """Seconds of one decode step at `rows` rows: N new tokens less 1 (see the module
    docstring), each the best of `setup.repeats` after a compiling warm-up."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from models.qwen import kv_cache
    from models.qwen.sampler import generate

    new = setup.new_tokens
    prompt = np.random.default_rng(rows).integers(0, cfg.vocab_size, (rows, setup.prompt))
    prompt = prompt.astype(np.int32)
    positions = np.broadcast_to(np.arange(setup.prompt), prompt.shape).astype(np.int32)

    def call(budget: int):
        cache = kv_cache.empty(cfg, rows, setup.prompt + new, setup.compute_dtype)
        sampled = generate(weights, cfg, prompt, positions, cache, jax.random.key(0),
                           max_tokens=new, max_new_tokens=jnp.int32(budget),
                           stop_tokens=jnp.array([-1], jnp.int32), temperature=jnp.float32(1.0))
        jax.block_until_ready(sampled.tokens)

    call(new)  # compiles: the budget is an array, so both timings share the program
    first = report.best_seconds(lambda: call(1), setup.repeats)
    whole = report.best_seconds(lambda: call(new), setup.repeats)
    return (whole - first) / (new - 1)


def measure_decode(cfg, params, setup: Setup, found) -> list[dict]:
    """Per row count: decode seconds per step, tokens/s, and with a known chip the step's
    roofline time and its share of the measured step."""
    import jax
    import jax.numpy as jnp

    from models.qwen.model import init_cache
    from models.qwen.sampler import sampling_params
    from tpu import roofline

    dtype = jnp.dtype(setup.compute_dtype)
    weights = sampling_params(jax.tree.map(lambda x: jnp.asarray(x, dtype), params), cfg)
    weight_bytes = sum(x.nbytes for x in jax.tree.leaves(weights))
    slots = setup.prompt + setup.new_tokens
    out = []
    for rows in setup.decode_rows:
        step_s = decode_seconds(weights, cfg, rows, setup)
        cache = jax.eval_shape(functools.partial(init_cache, cfg, rows, slots, dtype))
        read = weight_bytes + sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache))
        bound = (None if found is None else
                 roofline.roofline(roofline.decode_flops(cfg, rows, slots), read, found))
        out.append({"rows": rows, "prompt": setup.prompt, "new_tokens": setup.new_tokens,
                    "step_s": step_s, "tokens_per_s": rows / step_s, "roofline_s": bound,
                    "of_roofline": None if bound is None else bound / step_s})
    return out


def run_parent(params) -> str | None:
    """Where the trainer's run directory goes: /dev/shm when it has room for a checkpoint (the
    params and AdamW's two moments, twice over), so the checkpoint phase times orbax and not
    the machine's disk; else the default temporary folder."""
    import jax

    state = 3 * sum(x.size * 4 for x in jax.tree.leaves(params))
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > 2 * state else None


def measure_trainer(cfg, params, tokenizer, setup: Setup) -> dict:
    """The trainer's per-step phase seconds, read from its run directory's metrics.jsonl."""
    from prover_jax import trainer
    from prover_jax.model_policy import SamplingConfig
    from prover_jax.run_settings import TrainConfig

    knobs = dict(setup.trainer)
    with tempfile.TemporaryDirectory(prefix="device-bench-", dir=run_parent(params)) as directory:
        config = TrainConfig(
            env=ENV, credit="grpo", steps=2, run_dir=directory, checkpoint_every=10,
            sampling=SamplingConfig(max_new_tokens=knobs.pop("max_new_tokens")),
            learner=learner_config(setup),
            **knobs)
        trainer.train(config, cfg, params, tokenizer, log=lambda _: None)
        lines = (Path(directory) / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line) for line in lines if line.strip()]
    return {"env": ENV, **setup.trainer,
            "steps": [{"step": s["step"], "episodes": s["episode/count"],
                       "actions": s["episode/actions"],
                       **{f"{p}_s": s[f"time/{p}_s"] for p in PHASES}} for s in steps]}


def run(setup: Setup) -> dict:
    """Every measurement of the module docstring, and the wall time of each."""
    import jax

    kind, found = chip()
    memory = device_memory(found)
    cfg, params, tokenizer = build_model(setup)
    result = {"device_kind": kind, "backend": jax.default_backend(),
              "chip": None if found is None else found.name, "tiny": setup.tiny,
              "model": PRESET if not setup.tiny else "tiny",
              "params_m": sum(x.size for x in jax.tree.leaves(params)) / 1e6,
              "compute_dtype": setup.compute_dtype, "wall_s": {}}
    # the sampler first, while the learner's state does not take memory yet
    for name, measure in (("decode", lambda: measure_decode(cfg, params, setup, found)),
                          ("learner", lambda: measure_learner(cfg, params, setup, found,
                                                              memory)),
                          ("trainer", lambda: measure_trainer(cfg, params, tokenizer, setup))):
        start = time.perf_counter()
        result[name] = measure()
        result["wall_s"][name] = time.perf_counter() - start
        print(f"{name}: {result['wall_s'][name]:.1f} s", flush=True)
    return result


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def table(result: dict) -> str:
    learner = result["learner"]
    chip = result["chip"] or "no published peak: no MFU"
    lines = [(f"{result['device_kind']} ({chip}); {result['model']} "
              f"({result['params_m']:.0f}M parameters), {result['compute_dtype']}"), "",
             "| learner | rows x length | step (s) | tokens/s | MFU | HFU | compile (s) |",
             "|---|---|---:|---:|---:|---:|---:|",
             (f"| train step{' (remat)' if learner['remat'] else ''} | {learner['rows']} x "
              f"{learner['length']} | {learner['step_s']:.3f} | "
              f"{learner['tokens_per_s']:,.0f} | {_percent(learner['mfu'])} | "
              f"{_percent(learner['hfu'])} | {learner['compile_s']:.1f} |"), "",
             "| decode rows | ms / step | tokens/s | roofline ms | of roofline |",
             "|---:|---:|---:|---:|---:|"]
    for r in result["decode"]:
        bound = "-" if r["roofline_s"] is None else f"{1e3 * r['roofline_s']:.2f}"
        lines.append(f"| {r['rows']} | {1e3 * r['step_s']:.2f} | {r['tokens_per_s']:,.0f} | "
                     f"{bound} | {_percent(r['of_roofline'])} |")
    lines += ["", "| trainer step | episodes | " + " | ".join(f"{p} (s)" for p in PHASES) + " |",
              "|---:|---:|" + "---:|" * len(PHASES)]
    for s in result["trainer"]["steps"]:
        lines.append(f"| {s['step']} | {s['episodes']:.0f} | "
                     + " | ".join(f"{s[f'{p}_s']:.2f}" for p in PHASES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help="tiny shapes (automatic on the CPU backend)")
    parser.add_argument("--out", type=Path, default=report.BENCH / "results",
                        help="folder for device.json")
    args = parser.parse_args(argv)
    if args.tiny and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        # tiny programs: compiling dominates, and LLVM's level 0 compiles them faster (as the
        # tests do; no effect once jax has started)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_backend_optimization_level=0").strip()
    import jax

    setup = TINY if args.tiny or jax.default_backend() == "cpu" else DEVICE
    result = run(setup)
    text = table(result)
    print(text)
    machine = (f"{result['device_kind']} ({result['backend']}), jax {jax.__version__}; "
               f"{result['model']} with random weights, {result['compute_dtype']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device.json").write_text(
        json.dumps({"machine": machine, "results": result}, indent=1))


if __name__ == "__main__":
    main()
