"""The project's OpenAI-compatible chat-completions server.

Every LLM outside the policy (ProVer's agentic judge, CriticSearch's critic, a simulated user)
is reached through the ``openai`` client; this server lets all of them run offline against a
local backend, and lets tests drive the real client over real HTTP on loopback::

    from prover_jax.server import ScriptedBackend, Text, serve

    with serve(ScriptedBackend([Text("hello")])) as base_url:
        ...  # openai.OpenAI(base_url=base_url, api_key="unused")

The server streams (``stream=true``, server-sent events), returns ``n`` choices and
log-probs, and answers a model name it does not serve with a 404 (see
:mod:`prover_jax.server.app`). Backends implement :class:`Backend` (see
:mod:`prover_jax.server.backend` for the contract; :mod:`prover_jax.server.model` serves a local
Qwen, decoded in chunks so that its text streams as it is generated).
"""

from prover_jax.server.app import create_app
from prover_jax.server.backend import (
    Backend,
    BackendError,
    ChatReply,
    ChatRequest,
    Delta,
    ReplyStream,
    TokenLogprob,
    ToolCall,
)
from prover_jax.server.runner import serve
from prover_jax.server.scripted import Call, Calls, Fail, ScriptedBackend, Text

__all__ = [
    "Backend", "BackendError", "Call", "Calls", "ChatReply", "ChatRequest", "Delta", "Fail",
    "ReplyStream", "ScriptedBackend", "Text", "TokenLogprob", "ToolCall", "create_app", "serve",
]
