"""A Qwen model as the rollout policy: the chat-rendered episode in, an ``act`` tool call out.

Each turn, every live episode is rendered with the checkpoint's own chat template (system
prompt, task, earlier ``act(action=...)`` calls and their observations, then the generation
prompt), the batch is left-padded and sampled with ``models.qwen.sampler.generate`` until the
end-of-turn token, and the reply is parsed: the ``action`` argument of its first ``act`` tool
call, or else the reply's text (which the environment will usually reject, as it should).
The sampled token ids and log-probs travel with each :class:`Action`, for the learner's old
log-probs and for counting generated tokens.

Prompt lengths are bucketed to powers of two and the batch is padded to a power of two by
repeating its first prompt, so a rollout compiles ``generate`` only a few times.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envs import json_text
from models.qwen import QwenConfig, init_cache, positions_from_mask
from models.qwen.chat import ACT_TOOL, END_OF_TURN, agent_messages
from models.qwen.sampler import generate, sampling_params
from prover_jax.batch import bucket
from prover_jax.rollout import Action, Episode, Policy

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How the policy samples (temperature 0 is greedy)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_prompt_tokens: int = 64  # the smallest prompt bucket

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")


def parse_action(reply: str) -> str:
    """The ``action`` of the reply's first ``act`` tool call, else its text without thoughts."""
    for match in _TOOL_CALL.finditer(reply):
        try:
            call = json_text.loads(match.group(1))
        except ValueError:
            continue
        if not isinstance(call, dict) or call.get("name") != "act":
            continue
        arguments = call.get("arguments")
        if isinstance(arguments, dict) and isinstance(arguments.get("action"), str):
            return arguments["action"]
    return _THINK.sub("", reply).strip()


class ModelPolicy(Policy):
    """Samples actions from a Qwen model (params on device, config, tokenizer).

    The params are laid out for sampling once, here (`sampling_params`: on CPU a per-layer
    copy of the weights), so make one policy per weight update and drop it before training.
    """

    def __init__(self, params, cfg: QwenConfig, tokenizer, system: str,
                 sampling: SamplingConfig | None = None):
        self.params = sampling_params(params, cfg)
        self.cfg, self.tokenizer, self.system = cfg, tokenizer, system
        self.sampling = sampling or SamplingConfig()
        stop = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        if stop is None or stop == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {END_OF_TURN} token; is it a ChatML model?")
        self.stop_tokens = jnp.array([stop], jnp.int32)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop

    def prompt(self, episode: Episode) -> np.ndarray:
        """int32 [P] the episode so far, rendered up to the assistant's next reply."""
        messages = agent_messages(self.system, episode.observations[0],
                                  [a.text for a in episode.actions], episode.observations[1:])
        ids = self.tokenizer.apply_chat_template(
            messages, tools=[ACT_TOOL], add_generation_prompt=True, tokenize=True,
            return_dict=True)["input_ids"]
        return np.asarray(ids, np.int32)

    def act(self, episodes: Sequence[Episode], slots, pool, rng: random.Random) -> list[Action]:
        del slots, pool
        prompts = [self.prompt(e) for e in episodes]
        rows = bucket(len(prompts))
        length = bucket(max(len(p) for p in prompts), self.sampling.min_prompt_tokens)
        tokens = np.full((rows, length), self.pad_id, np.int32)
        mask = np.zeros((rows, length), bool)
        for row in range(rows):
            prompt = prompts[row] if row < len(prompts) else prompts[0]
            tokens[row, length - len(prompt):] = prompt
            mask[row, length - len(prompt):] = True
        s = self.sampling
        out = generate(self.params, self.cfg, jnp.asarray(tokens),
                       positions_from_mask(jnp.asarray(mask)),
                       init_cache(self.cfg, rows, length + s.max_new_tokens),
                       jax.random.key(rng.getrandbits(63)), max_tokens=s.max_new_tokens,
                       max_new_tokens=jnp.int32(s.max_new_tokens), stop_tokens=self.stop_tokens,
                       temperature=jnp.float32(s.temperature), top_k=jnp.int32(s.top_k),
                       top_p=jnp.float32(s.top_p), pad_id=self.pad_id)
        sampled, logprobs, lengths = jax.device_get((out.tokens, out.logprobs, out.lengths))
        actions = []
        for row in range(len(episodes)):
            ids = sampled[row, : lengths[row]].tolist()
            reply = self.tokenizer.decode(ids, skip_special_tokens=False)
            text = parse_action(reply.removesuffix(END_OF_TURN))
            actions.append(Action(text, tuple(ids),
                                  tuple(float(x) for x in logprobs[row, : lengths[row]])))
        return actions
