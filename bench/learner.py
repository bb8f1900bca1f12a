"""Train-step time and peak memory of our learner vs the same step in PyTorch eager.

Random Qwen3 weights are saved once as a Hugging Face folder and loaded by both sides. One step:
forward, PPO-clip loss (token-mean, clip 0.2 / 0.28) over the policy tokens with an entropy
metric, backward, global-norm clipping and AdamW (decay on matrices only). Ours:
`prover_jax.learner.Learner.train_step` (jitted, compiled before timing). Theirs: the
`transformers` model in eager mode, the same loss written with torch ops, `torch.optim.AdamW`.
Old log-probabilities come from each side's own model before timing (an on-policy first epoch);
the first step's loss and gradient norm of both sides are printed as a cross-check. Each side
also times the model's forward + backward alone (a log-sum-exp loss, no optimizer), which
separates the model's cost from the learner's. Each side runs in its own process, so its peak
memory is its own: resident memory (ru_maxrss) on CPU, the device allocator's peak on GPU.

Our learner runs the LM head on the trained tokens only (`LearnerConfig.head_buckets`), which
the PyTorch side, like most trainers, does not: a third row times ours with the head on every
token (`head_buckets=1`), the same work as PyTorch's. The cpu preset also sets `remat=True`,
`recompute_logits=False` and `logits_chunk=256` (the fastest of those tried on 2 cores; memory is
in the table).

Presets: "cpu" (about 11M parameters, batch 8 x 256, float32; the one that writes
bench/RESULTS.md) and "gpu" (the Qwen3-0.6B shape, batch 32 x 256, bf16 compute with float32
master weights on both sides, torch under autocast).

Usage: python bench/learner.py [--preset cpu|gpu] [--steps 5] [--no-write]
Prints a table, writes bench/results/learner.json and updates bench/RESULTS.md (cpu preset).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402

CLIP_LOW, CLIP_HIGH = 0.2, 0.28
LR, WEIGHT_DECAY, MAX_GRAD_NORM = 1e-5, 0.01, 1.0


class Preset(NamedTuple):
    config: dict  # transformers.Qwen3Config arguments
    rows: int
    length: int
    dtype: str  # compute dtype: "float32" or "bfloat16"
    learner: dict  # our LearnerConfig's memory/speed options


PRESETS = {
    "cpu": Preset(dict(vocab_size=16000, hidden_size=256, intermediate_size=768,
                       num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=64, max_position_embeddings=2048), 8, 256, "float32",
                  dict(remat=True, recompute_logits=False, logits_chunk=256)),
    "gpu": Preset(dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, max_position_embeddings=4096, tie_word_embeddings=True),
                  32, 256, "bfloat16", {}),
}


def make_checkpoint(preset: Preset, folder: Path) -> int:
    """Saves a random HF Qwen3 model; returns its parameter count."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.Qwen3Config(**preset.config))
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def make_batch(preset: Preset):
    """tokens int32 [B, L], loss_mask bool [B, L] (a 32-token prompt, then turns of 48 policy
    tokens and 16 observation tokens), advantages float32 [B, L] (one value per row)."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (preset.rows, preset.length)
    tokens = rng.integers(0, preset.config["vocab_size"], shape).astype(np.int32)
    position = np.arange(preset.length)
    loss_mask = np.broadcast_to((position >= 32) & ((position - 32) % 64 < 48), shape).copy()
    advantages = rng.normal(0, 1, (preset.rows, 1)).astype(np.float32) * loss_mask
    return tokens, loss_mask, advantages.astype(np.float32)


def measure_ours(preset: Preset, folder: Path, steps: int, every_token: bool = False) -> dict:
    import jax
    import jax.numpy as jnp

    from models import qwen
    from prover_jax import Batch
    from prover_jax.learner import (
        Learner,
        LearnerConfig,
        LossConfig,
        OptimizerConfig,
        TrainBatch,
    )

    cfg, params = qwen.load(folder)
    tokens, loss_mask, advantages = make_batch(preset)
    options = {**preset.learner, **({"head_buckets": 1} if every_token else {})}
    learner = Learner(cfg, LearnerConfig(
        loss=LossConfig(clip_low=CLIP_LOW, clip_high=CLIP_HIGH),
        optimizer=OptimizerConfig(learning_rate=LR, weight_decay=WEIGHT_DECAY,
                                  max_grad_norm=MAX_GRAD_NORM),
        compute_dtype=preset.dtype, **options))
    state = learner.init(params)
    del params
    positions = jnp.broadcast_to(jnp.arange(preset.length), tokens.shape)

    def model_loss(p):
        compute = jax.tree.map(lambda x: x.astype(preset.dtype), p)
        return jax.nn.logsumexp(qwen.forward(compute, cfg, tokens, positions)[0], -1).sum()

    model_grad = jax.jit(jax.grad(model_loss))
    jax.block_until_ready(model_grad(state.params))
    fwd_bwd = report.best_seconds(lambda: jax.block_until_ready(model_grad(state.params)), steps)

    old = learner.logprobs(state.params, tokens)
    rows = preset.rows
    batch = Batch(tokens, loss_mask, loss_mask.astype("int32") - 1, jnp.zeros(rows, "int32"),
                  jnp.zeros(rows, "float32"), jnp.ones((rows, 1), bool))
    train = TrainBatch(batch, advantages, old)
    start = time.perf_counter()
    state, metrics = learner.train_step(state, train)
    first = {"first_loss": float(metrics["loss"]), "first_grad_norm": float(metrics["grad_norm"])}
    compile_s = time.perf_counter() - start
    box = [state]

    def step():
        box[0], out = learner.train_step(box[0], train)
        jax.block_until_ready((box[0], out))

    result = {"step_s": report.best_seconds(step, steps), "fwd_bwd_s": fwd_bwd,
              "compile_s": compile_s, **first}
    stats = jax.devices()[0].memory_stats() or {}
    if jax.default_backend() != "cpu" and "peak_bytes_in_use" in stats:
        result["device_peak_mib"] = stats["peak_bytes_in_use"] / 2**20
    return result


def measure_theirs(preset: Preset, folder: Path, steps: int) -> dict:
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).to(device)
    model.train()
    tokens, loss_mask, advantages = make_batch(preset)
    tokens = torch.tensor(tokens.astype("int64"), device=device)
    mask = torch.tensor(loss_mask, device=device)
    mask[:, 0] = False
    advantages = torch.tensor(advantages, device=device)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": rest, "weight_decay": 0.0}], lr=LR)
    autocast = torch.autocast(device, dtype=torch.bfloat16,
                              enabled=preset.dtype == "bfloat16")

    def logits():
        with autocast:
            return model(tokens).logits.float()

    def logprobs_and_entropy():
        log_p = torch.log_softmax(logits()[:, :-1], dim=-1)
        picked = log_p.gather(-1, tokens[:, 1:, None])[..., 0]
        with torch.no_grad():
            entropy = -(log_p.exp() * log_p).sum(-1)
        pad = torch.zeros(tokens.shape[0], 1, device=device)
        return torch.cat([pad, picked], 1), torch.cat([pad, entropy], 1)

    def synchronize():
        if device == "cuda":
            torch.cuda.synchronize()

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        torch.logsumexp(logits(), -1).sum().backward()
        synchronize()

    fwd_bwd()
    fwd_bwd_s = report.best_seconds(fwd_bwd, steps)
    with torch.no_grad():
        old = logprobs_and_entropy()[0]

    def step() -> dict:
        logprobs, entropy = logprobs_and_entropy()
        ratio = torch.exp(torch.where(mask, logprobs - old, 0.0))
        surrogate = torch.minimum(ratio * advantages,
                                  ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH) * advantages)
        weights = mask.float() / mask.sum()
        loss = -(weights * surrogate).sum()
        (weights * entropy).sum().item()  # the entropy metric, as ours reports it
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        synchronize()
        return {"first_loss": loss.item(), "first_grad_norm": grad_norm.item()}

    first = step()
    result = {"step_s": report.best_seconds(step, steps), "fwd_bwd_s": fwd_bwd_s, "compile_s": 0.0,
              **first}
    if device == "cuda":
        result["device_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def child(preset: str, impl: str, folder: Path, steps: int) -> None:
    """Runs one side and prints its result as JSON (the parent reads it)."""
    sys.path.insert(0, str(ROOT))
    chosen = PRESETS[preset]
    if impl == "pytorch":
        result = measure_theirs(chosen, folder, steps)
    else:
        result = measure_ours(chosen, folder, steps, every_token=impl == "ours-every-token")
    result["peak_mib"] = result.pop("device_peak_mib", None) or (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    result["tokens_per_s"] = chosen.rows * chosen.length / result["step_s"]
    print(json.dumps(result))


def run(preset: str, steps: int) -> dict:
    chosen = PRESETS[preset]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "qwen3"
        row = {"preset": preset, "params_m": make_checkpoint(chosen, folder) / 1e6,
               "rows": chosen.rows, "length": chosen.length, "dtype": chosen.dtype}
        for impl in ("ours", "ours-every-token", "pytorch"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", impl, str(folder), "--preset", preset,
                 "--steps", str(steps)], capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                raise RuntimeError(f"the {impl} side failed:\n{out.stderr[-4000:]}")
            row[impl] = json.loads(out.stdout.strip().splitlines()[-1])
    row["speedup"] = row["pytorch"]["step_s"] / row["ours"]["step_s"]
    row["speedup_every_token"] = row["pytorch"]["step_s"] / row["ours-every-token"]["step_s"]
    return row


def table(row: dict) -> str:
    lines = [("| side | train step (s) | tokens/s | model fwd+bwd (s) | peak MiB | compile (s) | "
              "first loss | first grad norm |"), "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in (("ours (jit)", row["ours"]),
                    ("ours, LM head on every token", row["ours-every-token"]),
                    ("PyTorch eager", row["pytorch"])):
        lines.append(f"| {name} | {r['step_s']:.3f} | {r['tokens_per_s']:.0f} | "
                     f"{r['fwd_bwd_s']:.3f} | {r['peak_mib']:.0f} | {r['compile_s']:.1f} | "
                     f"{r['first_loss']:.6f} | {r['first_grad_norm']:.6f} |")
    lines.append(f"\nTrain-step speedup (PyTorch / ours): **{row['speedup']:.2f}x** "
                 f"({row['speedup_every_token']:.2f}x with the LM head on every token); "
                 f"{row['params_m']:.1f}M parameters, batch {row['rows']} x {row['length']}, "
                 f"{row['dtype']} compute.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per side (best kept)")
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "FOLDER"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.child:
        impl, folder = args.child
        child(args.preset, impl, Path(folder), args.steps)
        return
    row = run(args.preset, args.steps)
    text = table(row)
    print(text)
    if args.no_write or args.preset != "cpu":
        print(json.dumps(row))
        return
    import jax
    import torch

    config = PRESETS["cpu"].config
    machine = (f"{platform.machine()}, {os.cpu_count()} CPU cores, jax {jax.__version__}, "
               f"torch {torch.__version__}; Qwen3 {config['num_hidden_layers']} layers, "
               f"d={config['hidden_size']}, vocab {config['vocab_size']}; one PPO-clip + AdamW "
               f"step, float32; best of {args.steps} steps")
    report.write("learner", "Learner (`bench/learner.py`)", machine, text, row)


if __name__ == "__main__":
    main()
