"""Prefill and decode throughput of our Qwen models vs Hugging Face `transformers` on one CPU.

One config per family, each a few tens of millions of parameters, random weights saved once as a
Hugging Face folder and loaded by both sides. Prefill: batch 8 x 512 tokens, one forward
(ours jitted, compiled before timing; theirs eager under `torch.no_grad`). Decode: batch 8,
64-token prompts, 64 greedy new tokens (ours `models.qwen.sampler.generate` on params laid out
once by `sampling_params`, as a rollout policy holds them between weight updates; theirs
`model.generate`). Every measurement runs in its own process so its peak resident memory
(ru_maxrss) is its own; the two sides alternate over two rounds and each keeps its fastest,
so a drift in the machine's speed between processes does not favour one side.

Floors: what one phase would take if only its matmuls cost time. Prefill is compute-bound: its
matmul FLOPs (2 x tokens x matmul parameters) at the GEMM rate this CPU reaches for the MLP's
shape (4096 x D @ D x F, measured in the same process). Decode is bandwidth-bound: the matmul
weights, read once per step, at the rate of a jitted sum over an array of that size. "bound" is
the transformers time over our floor: the largest speedup any implementation could show.

Usage: python bench/models.py [--families qwen2 qwen3 qwen3_5]
Prints a table, writes bench/results/models.json and updates bench/RESULTS.md.
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

ROOT = Path(__file__).resolve().parents[1]
BATCH, PREFILL_LEN, PROMPT_LEN, NEW_TOKENS = 8, 512, 64, 64
ROUNDS = 2  # ours and transformers alternate, each side keeps its fastest round
COMMON = dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
              num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048)
FAMILIES = {
    "qwen2": ("Qwen2Config", dict(COMMON)),
    "qwen3": ("Qwen3Config", dict(COMMON, head_dim=64)),
    "qwen3_5": ("Qwen3_5TextConfig", dict(
        COMMON, head_dim=64, linear_num_key_heads=4, linear_num_value_heads=8,
        linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"]
        + ["linear_attention"] * 3 + ["full_attention"])),
}


def make_checkpoint(family: str, folder: Path) -> int:
    """Saves a random HF model of the family; returns its parameter count."""
    import torch
    import transformers

    torch.manual_seed(0)
    config_class, kwargs = FAMILIES[family]
    model = transformers.AutoModelForCausalLM.from_config(
        getattr(transformers, config_class)(**kwargs))
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def tokens(shape, vocab: int):
    import numpy as np

    return np.random.default_rng(0).integers(0, vocab, shape).astype(np.int32)


def measure_ours(folder: Path, phase: str) -> float:
    """Seconds of one prefill or one decode run (after a compiling warm-up)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from models import qwen
    from models.qwen.sampler import generate, sampling_params

    cfg, params = qwen.load(folder)
    if phase == "prefill":
        x = tokens((BATCH, PREFILL_LEN), cfg.vocab_size)
        pos = np.broadcast_to(np.arange(PREFILL_LEN), x.shape).astype(np.int32)
        run = jax.jit(lambda p, t, q: qwen.forward(p, cfg, t, q)[0])
        call = lambda: run(params, x, pos)  # noqa: E731
    else:
        x = tokens((BATCH, PROMPT_LEN), cfg.vocab_size)
        pos = np.broadcast_to(np.arange(PROMPT_LEN), x.shape).astype(np.int32)
        prepared = sampling_params(params, cfg)  # once per weight update, as ModelPolicy does

        def call():
            cache = qwen.init_cache(cfg, BATCH, PROMPT_LEN + NEW_TOKENS)
            return generate(prepared, cfg, x, pos, cache, jax.random.key(0),
                            max_tokens=NEW_TOKENS, max_new_tokens=jnp.int32(NEW_TOKENS),
                            stop_tokens=jnp.array([-1], jnp.int32),
                            temperature=jnp.float32(0.0)).tokens
    jax.block_until_ready(call())
    seconds = min(timed(lambda: jax.block_until_ready(call())) for _ in range(3))
    return seconds, floor_seconds(cfg, params, phase)


def matmul_weights(params) -> tuple[int, int]:
    """Entries of the weight matrices of the layers, and of the LM head (the embedding when
    tied); the embedding lookup costs no FLOPs."""
    import jax

    layers = sum(x.size for group in ("layers", "attn", "linear")
                 for x in jax.tree.leaves(params.get(group, {})) if x.ndim >= 3)
    head = params["lm_head"] if "lm_head" in params else params["embed"]
    return layers, head.size


def floor_seconds(cfg, params, phase: str) -> float:
    """The phase's time if only its matmuls cost anything (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def best(fn, *args):
        jax.block_until_ready(fn(*args))
        return min(timed(lambda: jax.block_until_ready(fn(*args))) for _ in range(10))

    rows = BATCH * PREFILL_LEN
    a = jnp.asarray(np.ones((rows, cfg.hidden_size), np.float32))
    b = jnp.asarray(np.ones((cfg.hidden_size, cfg.intermediate_size), np.float32))
    flops_per_s = 2 * a.size * cfg.intermediate_size / best(jax.jit(jnp.matmul), a, b)
    layers, head = matmul_weights(params)
    if phase == "prefill":
        return 2 * rows * (layers + head) / flops_per_s
    weights = jnp.ones(layers + head, jnp.float32)
    read = best(jax.jit(jnp.sum), weights)  # one pass over the weights: one decode step
    prompt = 2 * BATCH * PROMPT_LEN * layers / flops_per_s
    return prompt + NEW_TOKENS * read


def measure_theirs(folder: Path, phase: str) -> float:
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    vocab = model.config.vocab_size
    with torch.no_grad():
        if phase == "prefill":
            x = torch.tensor(tokens((BATCH, PREFILL_LEN), vocab).astype("int64"))
            call = lambda: model(x)  # noqa: E731
        else:
            x = torch.tensor(tokens((BATCH, PROMPT_LEN), vocab).astype("int64"))
            call = lambda: model.generate(  # noqa: E731
                x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
        call()
        return min(timed(call) for _ in range(3)), None


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def child(family: str, impl: str, phase: str, folder: Path) -> None:
    """Runs one measurement and prints it as JSON (the parent reads it)."""
    sys.path.insert(0, str(ROOT))
    seconds, floor = (measure_ours if impl == "ours" else measure_theirs)(folder, phase)
    n_tokens = BATCH * (PREFILL_LEN if phase == "prefill" else NEW_TOKENS)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "tokens_per_s": n_tokens / seconds,
                      "peak_mib": peak_mib, "floor_s": floor}))


def run(families) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            folder = Path(tmp) / family
            n_params = make_checkpoint(family, folder)
            for phase in ("prefill", "decode"):
                result = {"family": family, "params_m": n_params / 1e6, "phase": phase}
                for _ in range(ROUNDS):
                    for impl in ("ours", "transformers"):
                        out = subprocess.run(
                            [sys.executable, __file__, "--child", family, impl, phase,
                             str(folder)], check=True, capture_output=True, text=True, cwd=ROOT)
                        result[impl] = fastest(result.get(impl),
                                               json.loads(out.stdout.strip().splitlines()[-1]))
                result["speedup"] = (result["ours"]["tokens_per_s"]
                                     / result["transformers"]["tokens_per_s"])
                result["bound"] = result["transformers"]["seconds"] / result["ours"]["floor_s"]
                rows.append(result)
    return rows


def fastest(best: dict | None, new: dict) -> dict:
    """The faster of two rounds' measurements of one side, with the smaller floor of the two."""
    if best is None:
        return new
    floors = [x["floor_s"] for x in (best, new) if x["floor_s"] is not None]
    return {**min(best, new, key=lambda x: x["seconds"]), "floor_s": min(floors, default=None)}


def table(rows) -> str:
    lines = [("| family | params | phase | ours (s) | transformers (s) | ours tok/s | "
              "transformers tok/s | speedup | matmul floor (s) | bound | ours peak MiB | "
              "transformers peak MiB |"),
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['params_m']:.0f}M | {r['phase']} | "
                     f"{r['ours']['seconds']:.2f} | {r['transformers']['seconds']:.2f} | "
                     f"{r['ours']['tokens_per_s']:.0f} | {r['transformers']['tokens_per_s']:.0f} | "
                     f"{r['speedup']:.2f}x | {r['ours']['floor_s']:.2f} | {r['bound']:.2f}x | "
                     f"{r['ours']['peak_mib']:.0f} | "
                     f"{r['transformers']['peak_mib']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--child", nargs=4, metavar=("FAMILY", "IMPL", "PHASE", "FOLDER"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.child:
        family, impl, phase, folder = args.child
        child(family, impl, phase, Path(folder))
        return
    rows = run(args.families)
    text = table(rows)
    print(text)
    if args.no_write:
        return
    import jax
    import torch

    sys.path.insert(0, str(ROOT))
    from bench import report

    machine = (f"{platform.machine()}, {os.cpu_count()} CPU cores, jax {jax.__version__}, "
               f"torch {torch.__version__}; batch {BATCH}, prefill {PREFILL_LEN} tokens per "
               f"row, decode {NEW_TOKENS} greedy tokens after a {PROMPT_LEN}-token prompt, fp32")
    report.write("models", "Models (`bench/models.py`)", machine, text, rows)


if __name__ == "__main__":
    main()
