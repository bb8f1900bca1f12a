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
import functools
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
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

# A ChatML tool-calling template laid out like Qwen2.5's: tools listed in the system block,
# calls as <tool_call> JSON after the reply's text, tool results as <tool_response> blocks of
# a user turn. For tokenizers built here, which have no template of their own.
CHATML_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set rest = messages[1:] %}"
    "{{- '<|im_start|>system\\n' + messages[0].content }}"
    "{%- else %}{%- set rest = messages %}{{- '<|im_start|>system\\nYou are an agent.' }}"
    "{%- endif %}"
    "{%- if tools %}{{- '\\n\\n# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>' }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
    "{%- if m.content %}{{- '\\n' + m.content }}{%- endif %}"
    "{%- for call in m.tool_calls or [] %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": '"
    " + (call.function.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}"
    "{%- endif %}{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


REPLY_FORMATS = ("text", "tool_call")
# What `apply_chat_template` itself passes to a template; the other names it reads are arguments
# a caller may set (Qwen3's `enable_thinking`).
TEMPLATE_INPUTS = frozenset({"messages", "tools", "add_generation_prompt", "documents",
                             "continue_final_message"})
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*?)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


def template_arguments(tokenizer) -> frozenset[str]:
    """The names the tokenizer's chat template reads beyond the conversation itself: the
    arguments a caller may pass it (e.g. {"enable_thinking"} for Qwen3's)."""
    template = getattr(tokenizer, "chat_template", None)
    return _arguments_of(template) if isinstance(template, str) else frozenset()


@functools.lru_cache(maxsize=16)
def _arguments_of(template: str) -> frozenset[str]:
    """`template_arguments` of one template, parsed once (a parse takes tens of ms, and a
    policy is made per update)."""
    parsed = jinja2.Environment().parse(template)
    assigned = {name.name for name in parsed.find_all(jinja2.nodes.Name) if name.ctx == "store"}
    return frozenset(jinja2.meta.find_undeclared_variables(parsed)) - TEMPLATE_INPUTS - assigned


def check_template_arguments(tokenizer, arguments: Mapping[str, Any]) -> None:
    """Raises ValueError naming the first argument the tokenizer's chat template never reads
    (a misspelt ``enable_thinking`` would otherwise change nothing, silently)."""
    known = template_arguments(tokenizer)
    for name in sorted(arguments):
        if name in TEMPLATE_INPUTS or name not in known:
            raise ValueError(f"chat template argument {name!r} is not one the model's chat "
                             f"template reads; it reads {sorted(known) or 'none'}")


@dataclasses.dataclass(frozen=True)
class ParsedCall:
    """One tool call from a model's text: ``arguments`` an object, or the text the model wrote
    when it is not a JSON object."""

    name: str
    arguments: dict[str, Any] | str


def parse_call(block: str) -> ParsedCall | None:
    """The call inside one ``<tool_call>`` block, written either as Qwen2.5 / Qwen3 write it
    (``{"name": ..., "arguments": {...}}``) or as Qwen3.5 does (``<function=NAME>`` with one
    ``<parameter=KEY>`` block per argument, values as text); None when it is neither."""
    function = _FUNCTION.fullmatch(block)
    if function is not None:
        name, body = function.group(1).strip(), function.group(2)
        arguments = dict(_PARAMETER.findall(body))
        if _PARAMETER.sub("", body).strip():
            return None
        return ParsedCall(name, arguments) if name else None
    try:  # text nested about a thousand levels deep is a RecursionError, in either direction
        call = json.loads(block)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        arguments = call.get("arguments", {})
        return ParsedCall(call["name"], arguments if isinstance(arguments, dict | str)
                          else json.dumps(arguments))
    except (ValueError, RecursionError):
        return None


def tool_call_blocks(text: str) -> list[str]:
    """The text inside each ``<tool_call>...</tool_call>`` block of `text`, in order."""
    return _TOOL_CALL.findall(text)


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


CALL_PROBE = "f0rced_call_name"  # a name no tool has: where a rendered call names its function


def call_prefix(tokenizer: transformers.PreTrainedTokenizerFast, messages: Sequence[dict],
                tools: Sequence[dict], name: str | None = None, **template_kwargs) -> str:
    """The start of a reply that calls a tool, as the continuation of the generation prompt of
    `messages`: through the function's `name` and the quote or bracket closing it (``<tool_call>
    {"name": "get_order"`` for Qwen2.5 and Qwen3, ``<tool_call> <function=get_order>`` for
    Qwen3.5), or with `name` None up to where a name goes. Cut from the template's own rendering
    of an assistant message making that call, after `messages`.

    Raises:
      ValueError: the template writes the call in no ``<tool_call>`` block or without its name,
        or renders a reply that does not continue its generation prompt.
    """
    probe = name or CALL_PROBE
    call = {"type": "function", "function": {"name": probe, "arguments": {}}}

    def text(rendered: list, generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(rendered, tools=list(tools) or None, tokenize=False,
                                             add_generation_prompt=generation_prompt,
                                             **template_kwargs)

    prompt = text(list(messages), True)
    generation = prompt[prompt.rindex(ASSISTANT_START) + len(ASSISTANT_START):]
    called = text([*messages, {"role": "assistant", "content": "", "tool_calls": [call]}], False)
    spans = assistant_spans(called)
    reply = called[spans[-1][0]: spans[-1][1]] if spans else ""
    if "<tool_call>" not in reply:
        raise ValueError(f"the chat template writes a tool call as {reply!r}, in no "
                         "<tool_call> block")
    if not reply.startswith(generation):
        raise ValueError(f"the chat template renders a reply as {reply!r}, which does not "
                         f"continue its generation prompt {generation!r}")
    reply = reply[len(generation):]
    at = reply.find(probe, reply.find("<tool_call>"))
    if at < 0:
        raise ValueError(f"the chat template writes a tool call as {reply!r}, without its name")
    if name is None:
        return reply[:at]
    closed = at + len(probe)
    while closed < len(reply) and reply[closed] in "\"'>":
        closed += 1
    return reply[:closed]


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



PROBE_TASK = "The task."
PROBE_REPLY = {"role": "assistant", "content": "<think>\nA thought.\n</think>\n\n",
               "tool_calls": [{"type": "function", "function": {
                   "name": "act", "arguments": {"action": "an action"}}}]}


class AgentFormat:
    """The token pieces of an agent episode, cut from the checkpoint's own chat template.

    An episode's token stream is `prompt(task)`, then per turn the reply exactly as sampled
    followed by `after_reply(reply, observation)`: the end-of-turn token if the reply was cut
    before it, then the template's observation block and the next generation prompt. Each piece
    is tokenized on its own, once; the stream is never re-rendered.

    The observation block is what the template adds when a tool message follows an assistant
    message: the conversation is rendered without and with it, and the suffix after the
    assistant's end-of-turn token is taken. That suffix must be a true extension (the template
    may not rewrite what came before); every piece after the prompt starts right after a
    special token, so tokenizing it alone gives the tokens a full rendering would.

    `prefix_preserving` is true when the template starts a rendered reply with the generation
    prompt it gave the model; replies in the template's own form then make the stream equal
    the template's rendering of the whole conversation. Qwen3 with `enable_thinking=False` is
    not: its generation prompt holds an empty `<think>` block that a rendered earlier reply
    drops, and the stream keeps what the model saw.

    Thoughts stay in the stream: later turns see every earlier reply as it was sampled, so the
    one stream is both what the policy saw and what the learner trains on.

    Args:
      tokenizer: a fast tokenizer with a ChatML chat template.
      system: the system prompt.
      reply: how `reply_text` writes an action: "text" or "tool_call".
      template: arguments of the chat template (e.g. {"enable_thinking": False}).
      tools: the tool schemas the prompt offers.

    Raises:
      ValueError: a template argument the template does not read, a template that cannot
        write a "tool_call" reply, or one the stream cannot be cut from.
    """

    def __init__(self, tokenizer: transformers.PreTrainedTokenizerFast, system: str,
                 reply: str = "text", template: Mapping[str, Any] | None = None,
                 tools: Sequence[dict] = (ACT_TOOL,)):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template")
        self.end_of_turn = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        if self.end_of_turn is None or self.end_of_turn == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {END_OF_TURN} token; is it a ChatML model?")
        if reply not in REPLY_FORMATS:
            raise ValueError(f"reply must be one of {REPLY_FORMATS}, got {reply!r}")
        self.template_kwargs = dict(template or {})
        check_template_arguments(tokenizer, self.template_kwargs)
        self.tokenizer, self.system, self.reply = tokenizer, system, reply
        self.tools = list(tools)
        head = self._messages(PROBE_TASK)
        prompt = self._text(head, generation_prompt=True)
        if ASSISTANT_START not in prompt[prompt.rfind(END_OF_TURN) + 1:]:
            raise ValueError(f"the chat template's generation prompt has no {ASSISTANT_START!r};"
                             " is it a ChatML template?")
        self._generation_prompt = prompt[prompt.rindex(ASSISTANT_START) + len(ASSISTANT_START):]
        replied = self._text(head + [PROBE_REPLY], generation_prompt=False)
        if END_OF_TURN not in replied:
            raise ValueError(f"the chat template closes no reply with {END_OF_TURN}")
        self._replied = replied[: replied.rindex(END_OF_TURN) + len(END_OF_TURN)]
        self.prefix_preserving = self._replied.startswith(prompt)
        if reply == "tool_call":
            self._check_tool_call_replies()

    def _check_tool_call_replies(self) -> None:
        """Raises ValueError when the template writes no ``act`` call a reply could parse back."""
        probe = 'take "egg 1" <from> fridge 1'
        try:
            reply = self.reply_text(probe)
        except ValueError as e:
            reply = str(e)
        call = parse_call(next(iter(tool_call_blocks(reply)), ""))
        if call is None or call.name != "act" or call.arguments != {"action": probe}:
            raise ValueError("reply='tool_call' needs a chat template that writes tool calls as "
                             f"<tool_call> blocks; for an act call this one gives {reply!r}")

    def reply_text(self, action: str) -> str:
        """What a reply writing `action` holds before its end-of-turn token: the bare action
        for ``reply="text"``; for ``"tool_call"``, the template's own rendering of an assistant
        message calling ``act(action=...)`` (Qwen3.5 writes ``<function=act>`` blocks, Qwen2.5
        and Qwen3 JSON), as the continuation of the generation prompt: rendered as the last
        message, less what the generation prompt already holds (Qwen3's empty think block
        without thinking; with thinking, the reply starts with one)."""
        if self.reply == "text":
            return action
        call = {"type": "function", "function": {"name": "act",
                                                 "arguments": {"action": action}}}
        text = self._text(self._messages(PROBE_TASK) + [
            {"role": "assistant", "content": "", "tool_calls": [call]}], generation_prompt=False)
        spans = assistant_spans(text)
        if not spans:
            raise ValueError(f"the chat template renders a reply calling act as {text!r}")
        block = text[spans[-1][0]: spans[-1][1] - len(END_OF_TURN)]
        if not block.startswith(self._generation_prompt):
            raise ValueError(f"the chat template renders a reply as {block!r}, which does not "
                             f"continue its generation prompt {self._generation_prompt!r}")
        return block[len(self._generation_prompt):]

    def _messages(self, task: str) -> list[dict]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": task}]

    def _text(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools or None, tokenize=False,
            add_generation_prompt=generation_prompt, **self.template_kwargs)

    def _ids(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer(text, add_special_tokens=False)["input_ids"], np.int32)

    def prompt(self, task: str) -> np.ndarray:
        """int32 [P]: system prompt, tools, task and generation prompt."""
        return self._ids(self._text(self._messages(task), generation_prompt=True))

    def observation(self, text: str) -> np.ndarray:
        """int32 [O]: what follows a reply's end-of-turn token when `text` comes back: the
        template's observation block and the next generation prompt.

        Raises:
          ValueError: the template renders the earlier conversation differently once the
            observation is added (the block would not be a prefix extension).
        """
        full = self._text(self._messages(PROBE_TASK) + [PROBE_REPLY, {"role": "tool",
                                                                       "content": text}],
                          generation_prompt=True)
        if not full.startswith(self._replied):
            raise ValueError("the chat template renders the conversation before an observation "
                             "differently once the observation is added, so the observation "
                             "block is not a prefix extension of the token stream")
        return self._ids(full[len(self._replied):])

    def after_reply(self, reply: Sequence[int], observation: str) -> np.ndarray:
        """int32 [O]: the tokens between a sampled reply (ids) and the next one: the end-of-turn
        token when the reply was cut before it, then `observation(observation)`."""
        block = self.observation(observation)
        if len(reply) and reply[-1] == self.end_of_turn:
            return block
        return np.concatenate([np.array([self.end_of_turn], np.int32), block])
