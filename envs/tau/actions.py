"""The agent's action text: a message to the user, or one tool call in Qwen's native format.

An action is one assistant message. If it contains ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` (the format Qwen's chat templates teach, a missing closing tag tolerated),
the first such call is executed and everything else in the message is dropped — as the benchmark
keeps only the first tool call and drops the text of a message that calls a tool. Otherwise the
whole message, minus a leading ``<think>...</think>`` block, is said to the user. A call of
``respond`` is the benchmark's own form of a message to the user: its ``content`` is said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from envs import json_text

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_THINKING = re.compile(r"\A\s*<think>.*?</think>", re.DOTALL)
RESPOND = "respond"  # the benchmark's action name for a message to the user
FORMAT_HINT = ('Write one call as <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>, '
               "or write a plain message to the user.")


class ToolCall(NamedTuple):
    """A parsed tool call."""

    name: str
    arguments: dict[str, Any]


class Message(NamedTuple):
    """Text for the user."""

    text: str


class Malformed(NamedTuple):
    """A tool call that could not be parsed; ``error`` is the observation the agent gets."""

    error: str


def parse(action: str) -> ToolCall | Message | Malformed:
    """Classifies and parses one action text."""
    action = _THINKING.sub("", action, count=1)
    match = _TOOL_CALL.search(action)
    if match is None:
        return Message(action.strip())
    try:
        call = json_text.loads(match.group(1))
    except ValueError as error:
        return Malformed(f"Error: the tool call is not valid JSON ({error}). {FORMAT_HINT}")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return Malformed(f'Error: the tool call needs a string "name". {FORMAT_HINT}')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json_text.loads(arguments)
        except ValueError:
            pass
    if not isinstance(arguments, dict):
        return Malformed(f'Error: the tool call\'s "arguments" must be a JSON object. '
                         f"{FORMAT_HINT}")
    if call["name"] == RESPOND:
        if not isinstance(arguments.get("content"), str):
            return Malformed(f'Error: respond needs a string "content". {FORMAT_HINT}')
        return Message(arguments["content"])
    return ToolCall(call["name"], arguments)


def tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The action text that calls ``name`` with ``arguments`` (the chat template's rendering)."""
    return ("<tool_call>\n" + json.dumps({"name": name, "arguments": dict(arguments)})
            + "\n</tool_call>")
