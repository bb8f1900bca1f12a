"""The OpenAI-compatible server, driven by the real `openai` client over loopback HTTP: reply
shapes, streaming, n choices, the 404 of an unknown model and every parameter error."""

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
    (b'{"model": "m", "messages": [{"role": "user"}], "tools": [{"type": "x"}]}', "tools[0]"),
    (b'{"model": "m", "messages": [{"role": "user"}], "temperature": "hot"}', "'temperature'"),
    (b'{"model": "m", "messages": [{"role": "user"}], "seed": 1.5}', "'seed'"),
    (b'{"model": "m", "messages": [{"role": "user"}], "stop": [1]}', "'stop'"),
    (b'{"model": "m", "messages": [{"role": "user"}], "stop": ""}', "'stop'"),
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


# every parameter a client can get wrong, with the value, and the parameter the error names
BAD_PARAMETERS = [
    ("max_tokens", 0), ("max_tokens", "8"), ("max_completion_tokens", 0),
    ("temperature", -0.1), ("temperature", 2.5), ("top_p", 0), ("top_p", 1.5),
    ("n", 0), ("n", 17), ("n", 1.0), ("presence_penalty", 2.5), ("frequency_penalty", -3),
    ("top_logprobs", 21), ("logprobs", "yes"), ("stream", 1), ("seed", "7"),
    ("stream_options", {"include_usage": True}),  # without stream=true
    ("chat_template_kwargs", ["enable_thinking"]), ("response_format", {"type": "text"}),
]


def test_every_parameter_error_is_a_400_naming_the_parameter_sent():
    backend = ScriptedBackend([])
    with serve(backend) as base_url:  # one server for all the cases
        for param, value in BAD_PARAMETERS:
            body = {"model": "scripted", "messages": HELLO, param: value}
            status, reply = post(base_url, json.dumps(body).encode())
            assert status == 400, (param, value, reply)
            assert reply["error"]["param"] == param, (param, value)
            assert repr(param) in reply["error"]["message"], (param, value)
            if param == "max_completion_tokens":
                assert "'max_tokens'" not in reply["error"]["message"]
    assert backend.requests == []


def test_top_logprobs_without_logprobs_names_top_logprobs():
    body = {"model": "scripted", "messages": HELLO, "top_logprobs": 2}
    with serve(ScriptedBackend([])) as base_url:
        status, reply = post(base_url, json.dumps(body).encode())
    assert status == 400 and reply["error"]["param"] == "top_logprobs"
    assert "logprobs=true" in reply["error"]["message"]


def test_an_unknown_model_is_a_404_naming_the_served_one():
    backend = ScriptedBackend([Text("never sent")], model="judge-7b")
    with serve(backend) as base_url:
        with pytest.raises(openai.NotFoundError) as missing:
            client(base_url).chat.completions.create(model="gpt-4o", messages=HELLO)
        assert client(base_url).chat.completions.create(
            model="judge-7b", messages=HELLO).choices[0].message.content == "never sent"
    error = missing.value.body
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "'gpt-4o'" in error["message"] and "'judge-7b'" in error["message"]


def test_n_choices_each_with_its_index():
    backend = ScriptedBackend([Text("first"), Calls((Call("lookup", {"q": 1}),))])
    with serve(backend) as base_url:
        response = client(base_url).chat.completions.create(
            model="scripted", messages=HELLO, tools=[TOOL], n=2)
    assert [c.index for c in response.choices] == [0, 1]
    assert response.choices[0].message.content == "first"
    assert response.choices[1].message.tool_calls[0].function.arguments == '{"q": 1}'
    assert [c.finish_reason for c in response.choices] == ["stop", "tool_calls"]
    assert response.usage.completion_tokens == 1 + 3  # "first"; "lookup {'q': 1}"


def collect(chunks) -> tuple[dict[int, dict], list]:
    """A streamed reply put together per choice, as a client does: role, content, tool calls
    (merged by their index), finish reason; and the chunks' usage."""
    choices: dict[int, dict] = {}
    usage = []
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk"
        usage.append(chunk.usage)
        for c in chunk.choices:
            choice = choices.setdefault(c.index, {"role": None, "content": "", "calls": {},
                                                  "finish": None, "logprobs": []})
            choice["role"] = choice["role"] or c.delta.role
            choice["content"] += c.delta.content or ""
            for call in c.delta.tool_calls or []:
                merged = choice["calls"].setdefault(call.index, {"id": "", "name": "",
                                                                 "arguments": ""})
                merged["id"] += call.id or ""
                merged["name"] += call.function.name or ""
                merged["arguments"] += call.function.arguments or ""
            if c.logprobs is not None:
                choice["logprobs"] += c.logprobs.content
            choice["finish"] = c.finish_reason or choice["finish"]
    return choices, usage


def test_a_streamed_reply_equals_the_whole_one_and_ends_with_usage():
    script = [Calls((Call("lookup", {"q": "x"}), Call("lookup", "{broken")), content="look"),
              Text("the answer is 42")]
    backend = ScriptedBackend(script + script)
    with serve(backend) as base_url:
        llm = client(base_url)
        whole = llm.chat.completions.create(model="scripted", messages=HELLO, tools=[TOOL], n=2)
        chunks = list(llm.chat.completions.create(
            model="scripted", messages=HELLO, tools=[TOOL], n=2, stream=True,
            stream_options={"include_usage": True}))
    streamed, usage = collect(chunks)
    for index, choice in enumerate(whole.choices):
        got = streamed[index]
        assert got["role"] == "assistant" and got["finish"] == choice.finish_reason
        assert (got["content"] or None) == choice.message.content
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        assert [(c["name"], c["arguments"]) for c in got["calls"].values()] == calls
        assert all(c["id"].startswith("call_") for c in got["calls"].values())
    assert chunks[-1].choices == [] and usage[-1] == whole.usage  # the usage chunk, last
    assert all(u is None for u in usage[:-1])


def test_the_event_stream_is_server_sent_events_ending_with_done():
    body = {"model": "scripted", "messages": HELLO, "stream": True}
    with serve(ScriptedBackend([Text("hi")])) as base_url:
        request = urllib.request.Request(f"{base_url}/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            events = response.read().decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""}, {"content": "hi"}, {}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and "usage" not in chunks[0]


def test_a_failure_before_a_stream_starts_is_an_http_error():
    with serve(ScriptedBackend([Fail(503, "overloaded")])) as base_url:
        with pytest.raises(openai.APIStatusError, match="overloaded") as failure:
            list(client(base_url).chat.completions.create(model="scripted", messages=HELLO,
                                                         stream=True))
    assert failure.value.status_code == 503
