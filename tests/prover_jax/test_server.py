"""The OpenAI-compatible server, driven by the real `openai` client over loopback HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from prover_jax.server import Call, Calls, Fail, ScriptedBackend, Text, serve
from prover_jax.server.scripted import count_words

HELLO = [{"role": "user", "content": "hello there"}]
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def client(base_url: str, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, **options)


def post(base_url: str, body: bytes) -> tuple[int, dict]:
    """A raw POST to chat/completions: (status, decoded JSON body)."""
    request = urllib.request.Request(f"{base_url}/chat/completions", body,
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_text_reply_has_message_finish_reason_and_usage():
    backend = ScriptedBackend([Text("the answer is 42")])
    with serve(backend) as base_url:
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        response = client(base_url).chat.completions.create(model="scripted", messages=HELLO)
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "the answer is 42"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    prompt = count_words(json.dumps([HELLO, []]))
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (prompt, 4)
    assert response.usage.total_tokens == prompt + 4
    assert response.model == "scripted" and response.object == "chat.completion"


def test_tool_call_reply_round_trips_arguments_verbatim():
    backend = ScriptedBackend([Calls((Call("lookup", {"q": "x"}), Call("lookup", "{broken")),
                                     content="let me look")])
    with serve(backend) as base_url:
        response = client(base_url).chat.completions.create(
            model="scripted", messages=HELLO, tools=[TOOL])
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "let me look"
    calls = [(c.id, c.type, c.function.name, c.function.arguments)
             for c in choice.message.tool_calls]
    assert calls == [("call_0", "function", "lookup", '{"q": "x"}'),
                     ("call_1", "function", "lookup", "{broken")]


def test_request_fields_reach_the_backend():
    backend = ScriptedBackend([Text("ok")])
    with serve(backend) as base_url:
        client(base_url).chat.completions.create(
            model="scripted", messages=HELLO, tools=[TOOL], temperature=0.5, top_p=0.9,
            max_completion_tokens=17, seed=3, stop=["END"])
    (request,) = backend.requests
    assert request.messages == tuple(HELLO)
    assert request.tools == (TOOL,)
    assert (request.temperature, request.top_p, request.max_tokens, request.seed,
            request.stop) == (0.5, 0.9, 17, 3, ("END",))
    assert request.body["model"] == "scripted"


def test_models_lists_the_backend_model():
    with serve(ScriptedBackend([], model="judge-7b")) as base_url:
        assert [m.id for m in client(base_url).models.list()] == ["judge-7b"]


def test_http_errors_and_an_exhausted_script():
    backend = ScriptedBackend([Fail(503, "overloaded"), Fail(200, body="<html>oops")])
    with serve(backend) as base_url:
        llm = client(base_url)
        with pytest.raises(openai.APIStatusError, match="overloaded") as failure:
            llm.chat.completions.create(model="scripted", messages=HELLO)
        assert failure.value.status_code == 503
        # A raw non-JSON body: the client hands the text back instead of a ChatCompletion.
        assert llm.chat.completions.create(model="scripted", messages=HELLO) == "<html>oops"
        with pytest.raises(openai.InternalServerError, match="no reply left"):
            llm.chat.completions.create(model="scripted", messages=HELLO)


def test_a_slow_reply_times_out_the_client_and_the_server_goes_on():
    backend = ScriptedBackend([Text("late", delay_s=0.6), Text("on time")])
    with serve(backend) as base_url:
        llm = client(base_url, timeout=0.2)
        with pytest.raises(openai.APITimeoutError):
            llm.chat.completions.create(model="scripted", messages=HELLO)
        response = llm.chat.completions.create(model="scripted", messages=HELLO, timeout=5)
    assert response.choices[0].message.content == "on time"


@pytest.mark.parametrize("body, field", [
    (b"not json", "invalid request"),
    (b"[1, 2]", "JSON object"),
    (b'{"messages": [{"role": "user", "content": "x"}]}', "'model'"),
    (b'{"model": "m", "messages": []}', "'messages'"),
    (b'{"model": "m", "messages": [{"content": "x"}]}', "messages[0]"),
    (b'{"model": "m", "messages": [{"role": "user"}], "stream": true}', "'stream'"),
    (b'{"model": "m", "messages": [{"role": "user"}], "n": 2}', "'n'"),
    (b'{"model": "m", "messages": [{"role": "user"}], "tools": [{"type": "x"}]}', "tools[0]"),
    (b'{"model": "m", "messages": [{"role": "user"}], "temperature": "hot"}', "'temperature'"),
    (b'{"model": "m", "messages": [{"role": "user"}], "seed": 1.5}', "'seed'"),
    (b'{"model": "m", "messages": [{"role": "user"}], "stop": [1]}', "'stop'"),
])
def test_malformed_requests_get_400_naming_the_field(body, field):
    backend = ScriptedBackend([])
    with serve(backend) as base_url:
        status, reply = post(base_url, body)
    assert status == 400
    assert field in reply["error"]["message"]
    assert reply["error"]["type"] == "invalid_request_error"
    assert backend.requests == []


def test_port_zero_picks_free_ports_and_stopping_closes_them():
    with serve(ScriptedBackend([])) as first, serve(ScriptedBackend([])) as second:
        assert first != second
    with pytest.raises(openai.APIConnectionError):
        client(first).models.list()
