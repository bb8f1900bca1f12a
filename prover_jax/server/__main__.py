"""``python -m prover_jax.server --model FOLDER [--host 127.0.0.1] [--port 8000]``: a local Qwen
(a Hugging Face folder or a run directory) behind ``/v1/chat/completions`` and ``/v1/models``,
batched and streamed (`prover_jax.server.model`). It binds loopback unless told otherwise.

The chat template's default arguments are those the model was trained with (its stored chat
setting, ``chat.json``); ``--set chat.KEY=VALUE`` (repeatable, as on the other commands,
`prover_jax.settings.chat_with`) changes that setting, e.g. ``--set
chat.template.enable_thinking=false``; a request's ``chat_template_kwargs`` go over its
arguments. An argument the model's template does not read stops the start-up."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import uvicorn

from prover_jax import compile_cache
from prover_jax.config import add_dry_run, dry_run_lines
from prover_jax.platforms import skip_absent_tpu
from prover_jax.server.app import create_app
from prover_jax.server.model import ModelBackend
from prover_jax.server.runner import GRACEFUL_SHUTDOWN_S, LOOPBACK
from prover_jax.settings import chat_with


def main(argv: Sequence[str] | None = None) -> None:
    skip_absent_tpu()
    parser = argparse.ArgumentParser(prog="python -m prover_jax.server",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="model folder or run directory")
    parser.add_argument("--name", help="the model name /v1/models lists (default: the folder's)")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-batch", type=int, default=8, help="rows in one decode")
    parser.add_argument("--queue-capacity", type=int, default=64,
                        help="requests waiting before a 503")
    parser.add_argument("--default-max-tokens", type=int, default=256)
    parser.add_argument("--set", action="append", default=[], metavar="chat.KEY=VALUE",
                        help="a chat setting, e.g. chat.template.enable_thinking=false "
                        "(default: the model's stored one); repeatable")
    add_dry_run(parser)
    args = parser.parse_args(argv)
    try:
        chat = chat_with(args.set, None)  # ModelBackend puts its template over the stored one
    except ValueError as e:
        parser.error(str(e))
    if args.dry_run:
        print("\n".join([*dry_run_lines(None, [args.model]),
                         f"  serves on http://{args.host}:{args.port}/v1"]))
        return
    compile_cache.enable()
    try:
        backend = ModelBackend(args.model, args.name, args.max_batch, args.queue_capacity,
                               args.default_max_tokens,
                               template_kwargs=chat.template if chat else None)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    print(f"serving {args.model} as {backend.name!r} on http://{args.host}:{args.port}/v1",
          flush=True)
    try:
        uvicorn.run(create_app(backend), host=args.host, port=args.port, log_level="warning",
                    lifespan="off", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    finally:
        backend.close()


if __name__ == "__main__":
    main(sys.argv[1:])
