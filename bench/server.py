"""The local model server under load: requests/s and latency, batched vs one request at a time.

A random Qwen3 (a small shape, saved as a Hugging Face folder) is served on loopback by
`prover_jax.server.model.ModelBackend`. For 1, 8 and 32 concurrent `openai` clients, each sends
streamed requests of a short chat (greedy, a fixed number of new tokens) until the run's
requests are done, so after the first round the requests arrive staggered, each when its
client's last reply ended. "continuous" gathers concurrent requests into one decode
(``max_batch=32``) and lets a request that arrives during a decode join it at its next chunk;
"batched" is the same without joining (a request waits for the next decode); "sequential"
serves them one at a time (``max_batch=1``), what a server without batching does.
Every row bucket is compiled before timing (`ModelBackend.warm_up`). Latency is to the end of
the stream; time to first token (TTFT) to the first chunk with text, which the server sends
after the decode's first chunk (the prefill and one token), queueing included.

Usage: python bench/server.py [--requests 64] [--tokens 32]
Prints a table, writes bench/results/server.json and updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import openai

import envs
from bench import report
from models import qwen
from prover_jax.run_settings import TinyModel
from prover_jax.server import ChatRequest, serve
from prover_jax.server.model import ModelBackend
from prover_jax.trainer import tiny

SHAPE = TinyModel(vocab_size=1024, hidden_size=256, layers=4, heads=4, kv_heads=2, head_dim=64,
                  intermediate_size=768, tokenizer_episodes=50)
CLIENTS = (1, 8, 32)
PROMPT = "go to cabinet %d and look around"
MODEL = "bench"  # the name the backend serves


def make_model(folder: Path, shape: TinyModel = SHAPE) -> None:
    cfg, params, tokenizer = tiny(envs.make("household-small"), shape)
    qwen.save(folder, cfg, params)
    tokenizer.save_pretrained(folder)


def load(base_url: str, clients: int, requests: int, tokens: int) -> dict:
    """`requests` streamed chats from `clients` concurrent clients: requests/s, latency and
    time-to-first-token quantiles."""
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)

    def one(i: int) -> tuple[float, float]:
        start = time.perf_counter()
        first = None
        for chunk in client.chat.completions.create(
                model=MODEL, max_tokens=tokens, temperature=0.0, stream=True,
                messages=[{"role": "user", "content": PROMPT % (i % 10)}]):
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - start
        total = time.perf_counter() - start
        return total if first is None else first, total

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        first, latencies = zip(*pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    return {"requests_per_s": requests / wall, "p50_s": float(np.percentile(latencies, 50)),
            "p95_s": float(np.percentile(latencies, 95)),
            "ttft_p50_s": float(np.percentile(first, 50)),
            "ttft_p90_s": float(np.percentile(first, 90))}


def run(requests: int = 64, tokens: int = 32, clients=CLIENTS, shape: TinyModel = SHAPE
        ) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory() as folder:
        make_model(Path(folder), shape)
        for mode, batch, join in (("sequential", 1, False), ("batched", max(clients), False),
                                  ("continuous", max(clients), True)):
            backend = ModelBackend(folder, MODEL, max_batch=batch,
                                   queue_capacity=4 * max(clients), join=join)
            try:
                backend.warm_up(ChatRequest(MODEL, ({"role": "user", "content": PROMPT % 0},),
                                            max_tokens=tokens, temperature=0.0))
                with serve(backend) as base_url:
                    for count in clients:
                        batches = backend.batches
                        joins = backend.joins
                        row = {"mode": mode, "clients": count, "requests": requests,
                               "tokens": tokens, **load(base_url, count, requests, tokens),
                               "decodes": backend.batches - batches,
                               "joins": backend.joins - joins}
                        print(row, flush=True)
                        results.append(row)
            finally:
                backend.close()
    return results


def table(results: list[dict]) -> str:
    sequential = {r["clients"]: r for r in results if r["mode"] == "sequential"}
    batched = {r["clients"]: r for r in results if r["mode"] == "batched"}
    lines = [("| clients | mode | requests/s | p50 s | p95 s | TTFT p50 s | TTFT p90 s | "
              "decodes | joins | vs sequential | vs batched |"),
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def ratio(r: dict, base: dict | None) -> str:
        return f"{r['requests_per_s'] / base['requests_per_s']:.2f}x" if base else "-"

    for r in results:
        lines.append(f"| {r['clients']} | {r['mode']} | {r['requests_per_s']:.2f} | "
                     f"{r['p50_s']:.3f} | {r['p95_s']:.3f} | {r['ttft_p50_s']:.3f} | "
                     f"{r['ttft_p90_s']:.3f} | {r['decodes']} | {r.get('joins', 0)} | "
                     f"{ratio(r, sequential.get(r['clients']))} | "
                     f"{ratio(r, batched.get(r['clients']))} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    results = run(args.requests, args.tokens)
    body = table(results)
    print(body)
    report.write("server", "Local model server: batched vs sequential (`bench/server.py`)",
                 report.machine(), body, results)


if __name__ == "__main__":
    main()
