"""The sampling and evaluation settings as frozen dataclasses, importable without JAX: the
trainer's, SFT's and the evaluator's command lines read and check them before anything heavy
loads (`prover_jax.model_policy` samples with a `SamplingConfig`, `prover_jax.evaluate` runs an
`EvalConfig`); and what an evaluation's command line and its loop both need: its split, its
slots and pass^k.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import envs
from prover_jax.config import build, check_choice, override, to_dict

SAMPLING_DTYPES = ("float32", "bfloat16")
REPLY_FORMATS = ("text", "tool_call")


@dataclasses.dataclass(frozen=True)
class ChatConfig:
    """How an episode is written in the model's chat template (`models.qwen.chat.AgentFormat`).

    Attributes:
      reply: how a demonstrated reply writes its action: ``text``, the bare action, or
        ``tool_call``, a call of the ``act`` tool in the template's own tool-call form (what a
        real Qwen's prompt asks for). The policy reads an action from either form.
      template: arguments of the chat template, e.g. ``{"enable_thinking": False}`` for
        Qwen3 and Qwen3.5 (an argument the template does not read is an error).

    A run stores its setting with the model (``model/chat.json``, `prover_jax.runs`); a run
    started from that model, its evaluation and the server use it unless told otherwise.
    """

    reply: str = "text"
    template: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        check_choice("chat.reply", self.reply, REPLY_FORMATS)
        if not isinstance(self.template, Mapping) or not all(isinstance(k, str)
                                                             for k in self.template):
            raise ValueError(f"chat.template must map argument names to values, got "
                             f"{self.template!r}")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How the policy samples (temperature 0 is greedy).

    ``max_context`` caps an episode's token stream (None: the model's
    ``max_position_embeddings``). ``dtype`` is that of the weights and the KV cache while
    sampling ("bfloat16" halves both; the log-probabilities stay float32).
    ``reuse_cache=False`` prefills every episode's whole stream into a fresh cache at every turn
    (the reference path: same tokens, quadratic cost). ``decode_chunk`` 0 decodes every reply
    of a turn in one call; N > 0 decodes continuously, N tokens per call: between calls, a row
    whose reply ended takes its episode's next turn (or a waiting episode) while the other rows
    decode on (`model_policy.ModelPolicy`).
    """

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_prompt_tokens: int = 64  # the smallest bucket of new tokens per call
    max_context: int | None = None
    reuse_cache: bool = True
    dtype: str = "float32"
    decode_chunk: int = 0

    def __post_init__(self):
        check_choice("sampling.dtype", self.dtype, SAMPLING_DTYPES)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")
        if self.decode_chunk < 0 or (self.decode_chunk and not self.reuse_cache):
            raise ValueError(f"decode_chunk must be >= 0, and needs reuse_cache (continuous "
                             f"decoding keeps every row's cache), got {self.decode_chunk} with "
                             f"reuse_cache={self.reuse_cache}")
        if self.max_context is not None and self.max_context <= self.max_new_tokens:
            raise ValueError(f"max_context={self.max_context} leaves no room for a prompt "
                             f"and max_new_tokens={self.max_new_tokens}")


def chat_with(assignments: Sequence[str], base: ChatConfig | None) -> ChatConfig | None:
    """`base` (None: the default) with ``chat.KEY=VALUE`` assignments applied (a command line's
    ``--set chat.template.enable_thinking=false``); None without assignments.

    Raises:
      ValueError: an assignment outside ``chat.``, or a setting ChatConfig rejects.
    """
    if not assignments:
        return None
    data = {"chat": to_dict(base or ChatConfig())}
    for assignment in assignments:
        if not assignment.startswith("chat."):
            raise ValueError(f"--set {assignment}: only chat.* settings can be set here")
        data = override(data, assignment)
    return build(ChatConfig, data["chat"], "chat.")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What an evaluation runs.

    Attributes:
      split: the held-out tasks (None: `eval_split`).
      tasks: how many of them, in order (None: all).
      samples: sampled episodes per task (pass^k up to k = samples); 0 skips sampling.
      greedy: also run one greedy episode per task.
      max_actions: cap per episode (None: the environment's turn limit).
      max_new_tokens: per reply (None: 32, or the training run's).
      seed: the sampled episodes' randomness.
      decode_chunk: the sampler's `SamplingConfig.decode_chunk` (None: a training run's, 0
        elsewhere).
      probe_tasks: held-out tasks whose demonstrated episodes give the choice probe's states
        (`prover_jax.choice_probe`, the teacher-forced probability of the right choice there;
        an environment with a choice oracle, household-pivot); 0: no probe. A training run
        logs it as ``eval/probe/...``.
    """

    split: str | None = None
    tasks: int | None = 50
    samples: int = 1
    greedy: bool = True
    max_actions: int | None = None
    max_new_tokens: int | None = None
    seed: int = 0
    decode_chunk: int | None = None
    probe_tasks: int = 0

    def __post_init__(self):
        if self.samples < 0 or self.probe_tasks < 0 or (self.tasks is not None
                                                        and self.tasks < 1):
            raise ValueError(f"need samples >= 0, probe_tasks >= 0 and tasks >= 1, got "
                             f"{self.samples}, {self.probe_tasks}, {self.tasks}")
        if self.decode_chunk is not None and self.decode_chunk < 0:
            raise ValueError(f"decode_chunk must be >= 0, got {self.decode_chunk}")
        if not self.greedy and not self.samples and not self.probe_tasks:
            raise ValueError("nothing to run: greedy is off, samples and probe_tasks are 0")


MAX_SLOTS = 64  # episodes an evaluation keeps in flight at most


def eval_slots(tasks: int, samples: int) -> int:
    """Episodes an evaluation of `tasks` tasks keeps in flight: one per episode of its larger
    mode (greedy: one per task; sampled: `samples` per task), at most `MAX_SLOTS`."""
    return min(tasks * max(samples, 1), MAX_SLOTS)


def eval_split(env: envs.Env, split: str | None = None) -> str:
    """`split` checked against the environment's, or its held-out one: "eval", else
    "test", else its last split."""
    if split is not None:
        if split not in env.splits:
            raise ValueError(f"{env.name} has no split {split!r}; its splits: {env.splits}")
        return split
    return next((s for s in ("eval", "test") if s in env.splits), env.splits[-1])


def pass_at_k(successes: Sequence[int], samples: int, k: int) -> float:
    """tau-bench's pass^k over tasks: the mean of C(c, k) / C(n, k)."""
    return float(np.mean([math.comb(c, k) / math.comb(samples, k) for c in successes]))
