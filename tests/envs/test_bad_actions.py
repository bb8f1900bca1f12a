"""Whatever a model writes is an action, valid or not; only a non-string is the caller's bug."""

from __future__ import annotations

import json

import pytest

import envs
from envs import json_text

NAMES = ["household", "webshop", "searchqa", "tau-retail", "tau-airline"]
DEEP = "[" * 1000 + "]" * 1000


@pytest.fixture(scope="module", params=NAMES)
def env(request):
    env = envs.make(request.param)
    env.reset(env.tasks(env.splits[-1])[0])
    return env


def test_a_non_string_action_is_a_type_error_naming_it(env):
    state = env.snapshot()
    with pytest.raises(TypeError, match=f"{env.name}: an action is a str, got NoneType"):
        env.step(None)
    assert env.snapshot() == state


@pytest.mark.parametrize("action", [
    f"<tool_call>{DEEP}</tool_call>",
    '<tool_call>{"name": "act", "arguments": ' + DEEP + "}</tool_call>",
    '<tool_call>{"name": "get_user_details", "arguments": "' + DEEP + '"}</tool_call>',
    "<tool_call>" + json.dumps({"name": "calculate",  # deep, but under json's own limit
                                "arguments": {"expression": json.loads("[" * 40 + "]" * 40)}})
    + "</tool_call>",
    "\x00\udcff" * 50,
])
def test_model_output_never_raises(env, action):
    state = env.snapshot()
    step = env.step(action)
    assert isinstance(step.obs, str)
    env.restore(state)


def test_json_text_bounds_nesting_without_recursion():
    assert json_text.depth([[{"a": [1]}], 2]) == 4
    assert json_text.loads('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    with pytest.raises(ValueError, match="nested too deeply"):
        json_text.loads(DEEP)
    with pytest.raises(ValueError, match="more than 3 levels"):
        json_text.loads("[[[[1]]]]", max_depth=3)
    with pytest.raises(ValueError):
        json_text.loads("{not json")
