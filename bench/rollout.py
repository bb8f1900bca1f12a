"""Multi-turn household rollouts with a model policy: KV cache kept across turns vs re-prefill.

Both paths run `prover_jax.model_policy.ModelPolicy` on the same model, tasks and rng seed:

- re-prefill: ``SamplingConfig(reuse_cache=False)``: every turn, every episode's whole token
  stream is prefilled into a fresh KV cache (prefill work quadratic in turns);
- cache: ``SamplingConfig(reuse_cache=True)`` (the default): each episode keeps its cache row
  across turns and prefills only the new observation block; distinct streams are prefilled
  once (the G episodes of one task share their prompt).

16 episodes (4 household train tasks x a group of 4) on 16 pool slots, 5 / 10 / 20 actions
each (``max_actions``), replies of up to 32 tokens at temperature 1; a ~55M-parameter Qwen3
(8 layers, width 512, untied head, vocabulary 32000) with random weights, float32 on CPU. A
random model almost never samples the end-of-turn token, so every reply runs to 32 tokens and
every episode to its last action. The tokenizer is a small BPE trained on household text
(`prover_jax.trainer.tiny_tokenizer`); ids beyond it decode to nothing, so the environment gets
empty or garbled actions, which it rejects without ending the episode.

Each (path, turns) measurement runs in its own process, so its peak resident memory
(ru_maxrss) is its own. Its rollout is timed once, without the time JAX spent tracing, lowering
and compiling (the union of the spans of its compile events; "compile" is that time). At the
turn counts of ``--rerun`` the same rollout (same seed, so only shapes already compiled) runs
again with a fresh policy, and its plain wall time checks the subtraction. The timed rollout
splits its wall time by what the policy calls, each call blocked on its result and less its
compiles: `generate` (prefill of the new tokens, then decode), `kv_cache.prefill_rows` (the
shared stream heads; with continuous decoding also `kv_cache.extend_rows`, the contexts of
the rows that take their next turn), cache housekeeping (`empty` / `reset_rows` / `compact` /
`resize`), and the rest (tokenizer, templates, pool steps, episode bookkeeping).

Target: the cache path >= 3x faster than re-prefill at 20 turns, with prompt tokens prefilled
per episode growing linearly in turns.

Usage: python bench/rollout.py [--turns 5 10 20] [--rerun 5] [--max-new-tokens 32]
Prints a table, writes bench/results/rollout.json and updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PATHS = {"re-prefill": False, "cache": True}  # name -> SamplingConfig.reuse_cache
TURNS = (5, 10, 20)
RERUN = (5,)  # turn counts that also time a warm second rollout (checks the compile timing)
TASKS, GROUP, WORKERS, MAX_NEW_TOKENS, SEED = 4, 4, 1, 32, 0
TOKENIZER_VOCAB = 4096  # asked of the BPE trainer; the household corpus yields fewer tokens
COMMON = dict(model_type="qwen3", num_kv_heads=2, qk_norm=True, tie_word_embeddings=False,
              max_position_embeddings=32768)
MODELS = {
    "55m": dict(COMMON, vocab_size=32000, hidden_size=512, intermediate_size=1408,
                num_layers=8, num_heads=8, head_dim=64),
    "tiny": dict(COMMON, vocab_size=1024, hidden_size=32, intermediate_size=64, num_layers=1,
                 num_heads=4, head_dim=8),
}
PHASES = ("generate", "prefill_rows", "housekeeping")
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
_compile_spans: list[tuple[float, float]] = []  # (start, end) in time.time() of every compile
_listening: list[bool] = []  # the listener is registered once per process


def _record_compile(event: str, start: float, end: float, **_) -> None:
    if event in COMPILE_EVENTS:
        _compile_spans.append((start, end))


def compile_seconds(begin: float, end: float) -> float:
    """Seconds of [begin, end] (time.time()) that JAX spent tracing, lowering or compiling:
    the union of its compile events' spans (an inner jit traces inside an outer one)."""
    total, reached = 0.0, begin
    for lo, hi in sorted(_compile_spans):
        lo, hi = max(lo, reached), min(hi, end)
        if hi > lo:
            total, reached = total + hi - lo, hi
    return total


def listen_to_compiles() -> None:
    """Records the span of every JAX compile from now on, for `compile_seconds`."""
    import jax

    if not _listening:
        jax.monitoring.register_event_time_span_listener(_record_compile)
        _listening.append(True)


@contextlib.contextmanager
def phase_timers():
    """Times the policy's device calls, each blocked on its result, without the compiles
    inside them; yields {phase: seconds}."""
    import jax

    from models.qwen import kv_cache
    from prover_jax import model_policy

    seconds = dict.fromkeys(PHASES, 0.0)
    patched = [(model_policy, "generate", "generate"),
               *[(kv_cache, name, "prefill_rows") for name in ("prefill_rows", "extend_rows")],
               *[(kv_cache, name, "housekeeping")
                 for name in ("empty", "reset_rows", "compact", "resize")]]
    originals = [getattr(module, name) for module, name, _ in patched]

    def timed(fn, phase):
        def call(*args, **kwargs):
            begin = time.time()
            out = jax.block_until_ready(fn(*args, **kwargs))
            end = time.time()
            seconds[phase] += end - begin - compile_seconds(begin, end)
            return out
        return call

    for (module, name, phase), fn in zip(patched, originals):
        setattr(module, name, timed(fn, phase))
    try:
        yield seconds
    finally:
        for (module, name, _), fn in zip(patched, originals):
            setattr(module, name, fn)


def measure(path: str, turns: int, model: str = "55m", tasks: int = TASKS, group: int = GROUP,
            max_new_tokens: int = MAX_NEW_TOKENS, rerun: bool = False,
            workers: int = WORKERS) -> dict:
    """One rollout of `tasks` x `group` episodes for `turns` actions, timed without its
    compiles; with `rerun`, a second rollout of the same seed (every shape compiled) as well."""
    import jax
    import numpy as np

    import envs
    from envs.pool import EnvPool
    from models import qwen
    from prover_jax import trainer
    from prover_jax.model_policy import ModelPolicy, SamplingConfig
    from prover_jax.rollout import run, start

    listen_to_compiles()
    env = envs.make("household")
    if env.max_turns < turns:
        raise ValueError(f"household episodes end after {env.max_turns} turns, not {turns}")
    tokenizer = trainer.tiny_tokenizer(trainer.environment_texts(env), vocab_size=TOKENIZER_VOCAB)
    cfg = qwen.QwenConfig(**MODELS[model])
    params = qwen.init_numpy(cfg, SEED, scale=0.1)
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=1.0,
                              reuse_cache=PATHS[path])
    starts = [start(t) for t in env.tasks("train")[:tasks] for _ in range(group)]
    with EnvPool("household", len(starts), workers) as pool:
        pool.reset([0], [starts[0].task])  # worker start-up is not rollout time
        policy = ModelPolicy(params, cfg, tokenizer, env.instruction(), sampling)
        with phase_timers() as phases:
            begin = time.time()
            episodes = run(pool, policy, starts, random.Random(SEED), max_actions=turns)
            end = time.time()
        compiled = compile_seconds(begin, end)
        stats, slots = policy.stats, policy.cache_slots
        del policy  # and its cache, so the rerun does not raise the peak memory
        rerun_s = None
        if rerun:  # a fresh policy: its cache starts empty, as the first one's did
            again = ModelPolicy(params, cfg, tokenizer, env.instruction(), sampling)
            rerun_begin = time.perf_counter()
            run(pool, again, starts, random.Random(SEED), max_actions=turns)
            rerun_s = time.perf_counter() - rerun_begin
    for episode in episodes:  # the stream's loss-masked tokens are the sampled replies
        stream = episode.stream()
        replies = [t for a in episode.actions for t in a.token_ids]
        assert np.array_equal(stream.tokens[stream.loss_mask], replies)
    wall = end - begin - compiled
    return {
        "path": path, "turns": turns, "episodes": len(starts),
        "params_m": sum(x.size for x in jax.tree.leaves(params)) / 1e6,
        "tokenizer_vocab": len(tokenizer), "max_new_tokens": max_new_tokens,
        "wall_s": wall, "compile_s": compiled, "rerun_s": rerun_s,
        "generated": stats.generated, "generated_per_s": stats.generated / wall,
        "prefilled": stats.prefilled, "prefilled_per_episode": stats.prefilled / len(starts),
        "calls": stats.calls, "overflows": stats.overflows,
        "cache_slots": slots,  # at the end of the rollout
        "actions": sum(e.num_turns for e in episodes),
        "stream_tokens_per_episode": float(np.mean([len(e.stream().tokens) for e in episodes])),
        **{f"{phase}_s": phases[phase] for phase in PHASES},
        "other_s": wall - sum(phases.values()),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run(turns=TURNS, paths=tuple(PATHS), model: str = "55m", tasks: int = TASKS,
        group: int = GROUP, max_new_tokens: int = MAX_NEW_TOKENS, rerun=RERUN,
        in_process: bool = False) -> list[dict]:
    """One row per (path, turns), each measured in a child process unless `in_process`;
    turn counts in `rerun` also time a second, warm rollout."""
    rows = []
    for n in turns:
        for path in paths:
            if in_process:
                row = measure(path, n, model, tasks, group, max_new_tokens, n in rerun)
            else:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", path, str(n), model, str(tasks),
                     str(group), str(max_new_tokens), str(int(n in rerun))],
                    check=True, capture_output=True, text=True, cwd=ROOT)
                row = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per turn count with both paths: the speedup (re-prefill wall / cache wall), and per
    path the growth of prefilled tokens per episode over the previous turn count."""
    by = {(r["path"], r["turns"]): r for r in rows}
    turns = sorted({r["turns"] for r in rows})
    out = []
    for i, n in enumerate(turns):
        item = {"turns": n}
        if ("re-prefill", n) in by and ("cache", n) in by:
            item["speedup"] = by["re-prefill", n]["wall_s"] / by["cache", n]["wall_s"]
            item["prefill_ratio"] = (by["re-prefill", n]["prefilled"]
                                     / by["cache", n]["prefilled"])
        if i:
            for path in PATHS:
                if (path, n) in by and (path, turns[i - 1]) in by:
                    item[f"{path}_growth"] = (by[path, n]["prefilled_per_episode"]
                                              / by[path, turns[i - 1]]["prefilled_per_episode"])
        out.append(item)
    return out


def table(rows: list[dict]) -> str:
    lines = [("| path | turns | wall (s) | compile (s) | warm rerun (s) | generated tok/s | "
              "prefilled / episode | stream / episode | cache slots | generate (s) | "
              "prefill_rows (s) | housekeeping (s) | other (s) | peak MiB |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['path']} | {r['turns']} | {r['wall_s']:.2f} | {r['compile_s']:.2f} | "
            f"{'-' if r['rerun_s'] is None else format(r['rerun_s'], '.2f')} | "
            f"{r['generated_per_s']:.0f} | {r['prefilled_per_episode']:,.0f} | "
            f"{r['stream_tokens_per_episode']:,.0f} | {r['cache_slots']:,} | "
            f"{r['generate_s']:.2f} | "
            f"{r['prefill_rows_s']:.2f} | {r['housekeeping_s']:.2f} | {r['other_s']:.2f} | "
            f"{r['peak_mib']:.0f} |")
    items = summary(rows)
    if any("speedup" in s for s in items):
        lines += ["", ("| turns | speedup (re-prefill wall / cache wall) | prefilled tokens, "
                       "re-prefill / cache | prefilled / episode vs previous turns: re-prefill | "
                       "cache |"), "|---:|---:|---:|---:|---:|"]
        for s in items:
            growth = [f"{s[k]:.2f}x" if k in s else "-" for k in
                      ("re-prefill_growth", "cache_growth")]
            lines.append(f"| {s['turns']} | {s['speedup']:.2f}x | {s['prefill_ratio']:.1f}x | "
                         f"{growth[0]} | {growth[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", nargs="+", type=int, default=list(TURNS))
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
    parser.add_argument("--model", choices=list(MODELS), default="55m")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--rerun", nargs="*", type=int, default=list(RERUN),
                        help="turn counts that also time a warm second rollout")
    parser.add_argument("--child", nargs=7, metavar=("PATH", "TURNS", "MODEL", "TASKS",
                                                     "GROUP", "NEW_TOKENS", "RERUN"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.child:
        path, turns, model, tasks, group, new_tokens, rerun = args.child
        print(json.dumps(measure(path, int(turns), model, int(tasks), int(group),
                                 int(new_tokens), bool(int(rerun)))))
        return
    rows = run(args.turns, args.paths, args.model, max_new_tokens=args.max_new_tokens,
               rerun=args.rerun)
    text = table(rows)
    print(text)
    if args.no_write:
        return
    import jax

    from bench import report

    r = rows[0]
    machine = (f"{platform.machine()}, {os.cpu_count()} CPU cores, jax {jax.__version__} on "
               f"{jax.default_backend()}; {r['params_m']:.0f}M-parameter Qwen3 (random, fp32), "
               f"{r['episodes']} episodes ({TASKS} household train tasks x {GROUP}), replies of "
               f"up to {r['max_new_tokens']} tokens at temperature 1, {WORKERS} env worker")
    report.write("rollout", "Rollouts: KV cache across turns vs re-prefill "
                 "(`bench/rollout.py`)", machine, text, {"rows": rows, "summary": summary(rows)})


if __name__ == "__main__":
    main()
