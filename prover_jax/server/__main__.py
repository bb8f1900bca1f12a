"""``python -m prover_jax.server --model FOLDER [--host 127.0.0.1] [--port 8000]``: a local Qwen
(a Hugging Face folder or a run directory) behind ``/v1/chat/completions`` and ``/v1/models``,
batched and streamed (`prover_jax.server.model`). It binds loopback unless told otherwise.

The chat template's default arguments are those the model was trained with (its stored chat
setting, ``chat.json``); ``--chat-template-arg KEY=VALUE`` (repeatable) sets one over them, the
value read as YAML (``enable_thinking=false``); a request's ``chat_template_kwargs`` go over
them. An argument the model's template does not read stops the start-up."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import uvicorn
import yaml

from prover_jax import compile_cache
from prover_jax.server.app import create_app
from prover_jax.server.model import ModelBackend
from prover_jax.server.runner import GRACEFUL_SHUTDOWN_S, LOOPBACK


def main(argv: Sequence[str] | None = None) -> None:
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
    parser.add_argument("--chat-template-arg", action="append", default=[],
                        metavar="KEY=VALUE", help="a chat template argument (value as YAML), "
                        "e.g. enable_thinking=false; repeatable")
    args = parser.parse_args(argv)
    template_kwargs = {}
    for argument in args.chat_template_arg:
        key, equals, value = argument.partition("=")
        if not (key and equals):
            parser.error(f"--chat-template-arg {argument!r}: expected KEY=VALUE")
        try:
            template_kwargs[key] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            parser.error(f"--chat-template-arg {argument!r}: the value is not YAML: {e}")
    compile_cache.enable()
    try:
        backend = ModelBackend(args.model, args.name, args.max_batch, args.queue_capacity,
                               args.default_max_tokens, template_kwargs=template_kwargs)
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
