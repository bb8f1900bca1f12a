"""Tokenizer loading and agent conversations rendered with the model's own chat template.

An agent episode is a system prompt, the task, and per turn an assistant message that calls the
native tool `act(action=...)` followed by a tool message carrying the observation. `render`
applies the checkpoint's chat template (so the tokens are exactly what the template produces)
and marks the tokens the policy generates: in Qwen's ChatML every assistant block runs from
after `<|im_start|>assistant\\n` through its `<|im_end|>`, end-of-turn token included. The k-th
assistant block is agent turn k.

Loss-mask boundaries are found on the rendered text and mapped to tokens through the fast
tokenizer's offsets; a token straddling a boundary is an error, never a silent shift.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import transformers

ASSISTANT_START = "<|im_start|>assistant\n"
END_OF_TURN = "<|im_end|>"
ACT_TOOL = {
    "type": "function",
    "function": {
        "name": "act",
        "description": "Take one action in the environment.",
        "parameters": {
            "type": "object",
            "properties": {"action": {"type": "string", "description": "The action text."}},
            "required": ["action"],
        },
    },
}


@dataclasses.dataclass(frozen=True)
class Rendered:
    """One conversation as model input: int32 tokens [L], bool loss_mask [L], int32 turn_ids
    [L] (-1 off the policy's tokens) and the rendered text."""

    tokens: np.ndarray
    loss_mask: np.ndarray
    turn_ids: np.ndarray
    text: str


def load_tokenizer(folder: str | Path) -> transformers.PreTrainedTokenizerFast:
    """The fast tokenizer (with its chat template) stored in a local model folder."""
    folder = Path(folder)
    if not (folder / "tokenizer.json").exists() and not (folder / "vocab.json").exists():
        raise FileNotFoundError(f"{folder}: no tokenizer.json or vocab.json")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if not tokenizer.is_fast:
        raise ValueError(f"{folder}: a fast tokenizer is needed for token offsets")
    if not tokenizer.chat_template:
        raise ValueError(f"{folder}: the tokenizer has no chat template")
    return tokenizer


def agent_messages(system: str, task: str, actions: Sequence[str],
                   observations: Sequence[str], thoughts: Sequence[str] | None = None
                   ) -> list[dict]:
    """Chat messages of an episode: `act(action=...)` tool calls and tool observations.

    Args:
      system: system prompt (e.g. the environment's instructions).
      task: the task text, sent as the user message.
      actions: the action of each turn.
      observations: the observation after each turn (one per action, or one fewer when the
        episode ended on the last action).
      thoughts: optional text the policy wrote before each tool call.
    """
    if len(observations) not in (len(actions), len(actions) - 1):
        raise ValueError(f"{len(actions)} actions need {len(actions)} or {len(actions) - 1} "
                         f"observations, got {len(observations)}")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    for t, action in enumerate(actions):
        call = {"type": "function",
                "function": {"name": "act", "arguments": {"action": action}}}
        content = thoughts[t] if thoughts is not None else ""
        messages.append({"role": "assistant", "content": content, "tool_calls": [call]})
        if t < len(observations):
            messages.append({"role": "tool", "content": observations[t]})
    return messages


def assistant_spans(text: str) -> list[tuple[int, int]]:
    """Character spans [start, end) of the policy-generated part of each assistant block."""
    spans, pos = [], 0
    while (start := text.find(ASSISTANT_START, pos)) >= 0:
        begin = start + len(ASSISTANT_START)
        end = text.find(END_OF_TURN, begin)
        if end < 0:
            raise ValueError(f"assistant block at character {start} has no {END_OF_TURN}")
        spans.append((begin, end + len(END_OF_TURN)))
        pos = end
    return spans


def render(tokenizer: transformers.PreTrainedTokenizerFast, messages: Sequence[dict],
           tools: Sequence[dict] = (ACT_TOOL,), **template_kwargs) -> Rendered:
    """Renders messages with the tokenizer's chat template and marks the policy's tokens.

    Args:
      tokenizer: a fast tokenizer with a ChatML chat template (Qwen2.5, Qwen3, Qwen3.5).
      messages: chat messages (see `agent_messages`).
      tools: tool schemas shown to the model.
      **template_kwargs: passed to the template (e.g. enable_thinking=False).

    Returns:
      Rendered.

    Raises:
      ValueError: the rendering has a different number of assistant blocks than the messages
        have assistant messages, or a token straddles an assistant block's boundary.
    """
    text = tokenizer.apply_chat_template(list(messages), tools=list(tools) or None,
                                         tokenize=False, **template_kwargs)
    spans = assistant_spans(text)
    n_assistant = sum(m["role"] == "assistant" for m in messages)
    if len(spans) != n_assistant:
        raise ValueError(f"the chat template rendered {len(spans)} assistant blocks for "
                         f"{n_assistant} assistant messages; is it a ChatML template?")
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    tokens = np.asarray(encoded["input_ids"], np.int32)
    offsets = np.asarray(encoded["offset_mapping"], np.int64).reshape(-1, 2)
    turn_ids = np.full(tokens.shape, -1, np.int32)
    for turn, (begin, end) in enumerate(spans):
        inside = (offsets[:, 0] >= begin) & (offsets[:, 1] <= end)
        straddles = (offsets[:, 0] < end) & (offsets[:, 1] > begin) & ~inside
        if straddles.any():
            raise ValueError(f"token {int(np.flatnonzero(straddles)[0])} straddles the "
                             f"boundary of assistant turn {turn}")
        turn_ids[inside] = turn
    return Rendered(tokens, turn_ids >= 0, turn_ids, text)

