"""The local model behind the OpenAI-compatible server, through the real `openai` client over
HTTP on loopback: replies equal the sampler's own decode whatever the batch, batching,
streaming (equal to the whole reply, tool calls included, and a client that leaves frees its
row), n choices, log-probs and penalties against a reference forward, chat template arguments,
limits and errors, the judge, critic and tau's simulated user on it, and a clean shutdown."""

from __future__ import annotations

import concurrent.futures
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import openai
import pytest

import envs
from envs.tau import LLMUser
from models import qwen
from models.qwen import kv_cache
from models.qwen.sampler import Sampled, generate
from prover_jax.judges.agentic import AgenticConfig, AgenticJudge
from prover_jax.judges.critic import Critic, CriticConfig
from prover_jax.run_settings import TinyModel
from prover_jax.server import ChatRequest, serve
from prover_jax.server import model as model_module
from prover_jax.server.model import ModelBackend, parse_tool_calls, split_reply
from prover_jax.trainer import tiny
from tests.prover_jax.test_judges import FAILURES, SUCCESS
from tests.prover_jax.test_server import collect

ROOT = Path(__file__).resolve().parents[2]
SHAPE = TinyModel(vocab_size=320, hidden_size=32, layers=1, heads=2, kv_heads=1, head_dim=16,
                  intermediate_size=64, tokenizer_episodes=5)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random Qwen3 saved as a Hugging Face folder, with its chat template."""
    cfg, params, tokenizer = tiny(envs.make("household-small"), SHAPE)
    path = tmp_path_factory.mktemp("tiny-qwen")
    qwen.save(path, cfg, params)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def backend(folder):
    model = ModelBackend(folder, name="tiny", max_batch=8)
    yield model
    model.close()


@pytest.fixture(scope="module")
def client(backend):
    with serve(backend) as base_url:
        yield openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)


def ask(client, text, **options):
    return client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": text}], **options)


def solo_greedy(backend, prompt, max_tokens):
    """The sampler's own greedy decode of one prompt, no batch, no padding."""
    out = generate(backend.params, backend.cfg, jnp.asarray([prompt], jnp.int32),
                   jnp.arange(len(prompt), dtype=jnp.int32)[None],
                   kv_cache.empty(backend.cfg, 1, len(prompt) + max_tokens), jax.random.key(0),
                   max_tokens=max_tokens, max_new_tokens=jnp.int32(max_tokens),
                   stop_tokens=backend.stop_ids, temperature=jnp.float32(0.0))
    ids = np.asarray(out.tokens[0, : int(out.lengths[0])])
    if len(ids) and int(ids[-1]) in np.asarray(backend.stop_ids).tolist():
        ids = ids[:-1]
    return backend.tokenizer.decode(ids, skip_special_tokens=False)


def test_tool_calls_parse_and_malformed_output_stays_text():
    text = ('Checking.\n<tool_call>\n{"name": "look", "arguments": {"room": "kitchen"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "finish", "arguments": "{}"}\n</tool_call>')
    content, calls = parse_tool_calls(text)
    assert content == "Checking." and [c.name for c in calls] == ["look", "finish"]
    assert json.loads(calls[0].arguments) == {"room": "kitchen"} and calls[1].arguments == "{}"
    for broken in ("<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>',
                   "<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>"):
        assert parse_tool_calls(broken) == (broken, ())
    assert parse_tool_calls("plain") == ("plain", ())


def test_text_arguments_are_typed_by_the_tools_schemas():
    """Qwen3.5 writes every argument as text; the request's schema says what it is."""
    tools = [{"type": "function", "function": {"name": "get_segment", "parameters": {
        "type": "object", "properties": {"traj_id": {"type": "integer"}, "note": {"type": "string"},
                                         "turns": {"type": "array"}}}}}]
    text = ("<tool_call>\n<function=get_segment>\n<parameter=traj_id>\n3\n</parameter>\n"
            "<parameter=note>\n7\n</parameter>\n<parameter=turns>\n[1, 2]\n</parameter>\n"
            "<parameter=other>\n4\n</parameter>\n</function>\n</tool_call>")
    _, (call,) = parse_tool_calls(text, tools)
    assert json.loads(call.arguments) == {"traj_id": 3, "note": "7", "turns": [1, 2],
                                          "other": "4"}
    bad = text.replace("\n3\n", "\nthree\n")
    assert json.loads(parse_tool_calls(bad, tools)[1][0].arguments)["traj_id"] == "three"


def test_concurrent_requests_share_decodes_and_equal_solo_decodes(backend, client):
    texts = [f"go to drawer {i}" for i in range(8)]  # one prompt length: one solo program
    before = backend.batches
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda t: ask(client, t, temperature=0.0, max_tokens=12), texts))
    assert backend.batches - before < 8  # batched
    for text, reply in zip(texts, replies):
        request = [{"role": "user", "content": text}]
        prompt = backend.tokenizer.apply_chat_template(request, add_generation_prompt=True,
                                                       tokenize=True)
        prompt = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
        assert reply.choices[0].message.content == solo_greedy(backend, list(prompt), 12)
        assert reply.usage.prompt_tokens == len(prompt)
        assert 1 <= reply.usage.completion_tokens <= 12
        assert reply.choices[0].finish_reason in ("stop", "length")
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_tools_reach_the_template(backend):
    tool = {"type": "function", "function": {"name": "get_segment", "parameters": {
        "type": "object", "properties": {"start": {"type": "integer"}}}}}
    request = ChatRequest("tiny", ({"role": "user", "content": "hi"},), tools=(tool,))
    text = backend.tokenizer.decode(backend.prompt_ids(request)[0])
    assert '"name": "get_segment"' in text and text.endswith("<|im_start|>assistant\n")


def test_a_seed_gives_the_same_sample(client):
    first, second = (ask(client, "hello", temperature=1.0, seed=7, max_tokens=8)
                     for _ in range(2))
    assert first.choices[0].message.content == second.choices[0].message.content


def test_bad_requests_are_400s_naming_the_problem(backend, client):
    with pytest.raises(openai.BadRequestError, match="exceed the context"):
        ask(client, "look " * 20, max_tokens=backend.context)
    with pytest.raises(openai.BadRequestError, match="'temperature' must be a number"):
        ask(client, "hi", temperature="hot")
    for param, value in (("max_tokens", 0), ("max_completion_tokens", 0), ("n", 9)):
        with pytest.raises(openai.BadRequestError, match=f"'{param}' must be") as bad:
            ask(client, "hi", **{param: value})
        assert bad.value.body["param"] == param  # n: more rows than max_batch=8
    with pytest.raises(openai.BadRequestError, match="'enable_thinkin' is not one") as bad:
        ask(client, "hi", extra_body={"chat_template_kwargs": {"enable_thinkin": False}})
    assert bad.value.body["param"] == "chat_template_kwargs"
    with pytest.raises(openai.NotFoundError, match="serves 'tiny'") as missing:
        client.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "x"}])
    assert missing.value.body["code"] == "model_not_found"


def test_full_queue_is_a_503_a_gone_client_frees_its_place_and_a_crash_is_a_500(
        folder, monkeypatch):
    model = ModelBackend(folder, name="tiny", queue_capacity=2)
    release, decode, joining, decoded = threading.Event(), model.decode, model._joining, []

    def held(jobs):
        decoded.extend(job.request.messages[0]["content"] for job in jobs)
        return release.wait(60) and decode(jobs)

    def joined(*args):  # requests that join a running batch are decoded too
        jobs = joining(*args)
        decoded.extend(job.request.messages[0]["content"] for job in jobs)
        return jobs

    monkeypatch.setattr(model, "decode", held)
    monkeypatch.setattr(model, "_joining", joined)
    with serve(model) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        impatient = client.with_options(timeout=1.0)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            running = pool.submit(ask, client, "first", max_tokens=4)
            time.sleep(0.5)  # the worker holds it
            leaving = pool.submit(ask, impatient, "leaves", max_tokens=4)
            time.sleep(0.3)  # queued: both places taken
            with pytest.raises(openai.APIStatusError) as full:
                ask(client, "third", max_tokens=4)
            with pytest.raises(openai.APITimeoutError):
                leaving.result()
            time.sleep(0.5)  # the server notices the client is gone
            waiting = pool.submit(ask, client, "after", max_tokens=4)  # its place is free
            time.sleep(0.3)
            release.set()
            assert running.result().choices and waiting.result().choices
        assert full.value.status_code == 503
        assert full.value.response.headers["retry-after"] == "1"
        assert "leaves" not in decoded and "after" in decoded  # never decoded
        monkeypatch.setattr(model, "decode", lambda jobs: 1 / 0)
        with pytest.raises(openai.InternalServerError, match="the model failed: division"):
            ask(client, "boom", max_tokens=4)
        monkeypatch.setattr(model, "decode", decode)
        assert ask(client, "still serving", max_tokens=4).choices  # the server went on
    model.close()
    assert not model._worker.is_alive()


def test_the_judge_and_the_critic_run_on_the_local_model(client):
    base_url = str(client.base_url)
    judge = AgenticJudge(AgenticConfig(base_url=base_url, model="tiny", max_completion_tokens=16,
                                       max_wall_s=60))
    proposal = judge.propose(SUCCESS, FAILURES, random.Random(0))  # never raises
    assert proposal.valid or proposal.error
    assert proposal.prompt_tokens > 0 and proposal.rounds >= 1
    critic = Critic(CriticConfig(base_url=base_url, model="tiny", max_completion_tokens=16))
    labels = critic.label_group([SUCCESS, *FAILURES])
    assert labels.labels.shape == (3, 5)


def test_tau_runs_with_the_simulated_user_on_the_local_model(client):
    user = LLMUser(str(client.base_url), "tiny", max_tokens=8, max_retries=0)
    env = envs.make("tau-retail", user=user)
    task = env.tasks(env.splits[0])[0]
    first = env.reset(task)
    assert isinstance(first, str)
    step = env.step("Could you tell me your name?")
    assert isinstance(step.obs, str)


def test_the_command_line_serves_and_shuts_down_cleanly(folder):
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "prover_jax.server", "--model",
                                str(folder), "--port", str(port)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models",
                                            timeout=1) as response:
                    models = json.load(response)
                break
            except OSError:  # not listening yet (urllib.error.URLError is an OSError)
                assert process.poll() is None, process.stdout.read()
                time.sleep(0.5)
        assert [m["id"] for m in models["data"]] == [folder.name]
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)
        assert "Traceback" not in process.stdout.read()
        with pytest.raises(OSError):  # nothing listens any more
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
    finally:
        process.kill()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_trainer_serves_its_judge_model_for_the_run(folder, tmp_path):
    """``--judge-model FOLDER``: the run starts the server, the critic labels every group
    through it (a failed group would count in ``failed_groups``), and it stops with the run; the
    endpoint is not written into the run's config, so the run resumes."""
    from prover_jax.train import main

    arguments = ["--env", "household-small", "--credit", "criticsearch", "--steps", "1",
                 "--groups", "1", "--group-size", "2", "--run-dir", str(tmp_path),
                 "--judge-model", str(folder), "--set", "max_actions=2",
                 "--set", "sampling.max_new_tokens=4", "--set", "tiny.vocab_size=256",
                 "--set", "tiny.hidden_size=32", "--set", "tiny.layers=1",
                 "--set", "tiny.intermediate_size=64", "--set", "tiny.head_dim=8",
                 "--set", "tiny.tokenizer_episodes=5",
                 "--set", "host.critic_config.max_completion_tokens=8"]
    before = set(threading.enumerate())
    main(arguments)
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["credit/criticsearch/failed_groups"] == 0
    stored = json.loads((tmp_path / "config.json").read_text())["host"]
    assert stored["judge_model"] == str(folder) and "base_url" not in stored["critic_config"]
    main([*arguments[:5], "2", *arguments[6:]])  # resumes with the same config
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
    serving = [t.name for t in set(threading.enumerate()) - before
               if t.name.startswith(("openai-server", "model-backend"))]
    assert not serving  # the server and the backend's worker stopped with the run


# ---------------------------------------------------------------------------------- streaming


def test_a_greedy_stream_arrives_in_chunks_and_equals_the_whole_reply(client):
    whole = ask(client, "go to drawer 3", temperature=0.0, max_tokens=16, logprobs=True)
    chunks = list(ask(client, "go to drawer 3", temperature=0.0, max_tokens=16, logprobs=True,
                      stream=True, stream_options={"include_usage": True}))
    choices, usage = collect(chunks)
    streamed = choices[0]
    assert streamed["content"] == whole.choices[0].message.content
    assert streamed["finish"] == whole.choices[0].finish_reason == "length"
    assert usage[-1] == whole.usage
    assert [t.token for t in streamed["logprobs"]] == [
        t.token for t in whole.choices[0].logprobs.content]
    # the tokens came as decoded: the first after the prefill, then a chunk
    sizes = [len(c.choices[0].logprobs.content) for c in chunks
             if c.choices and c.choices[0].logprobs]
    assert sizes == [1, model_module.CHUNK_TOKENS - 1]


def test_split_reply_of_any_prefix_starts_the_whole_reply():
    """What `split_reply` decides from a prefix of a reply (``final=False``) is a prefix of the
    whole reply's content and calls: streamed text never has to be taken back."""
    texts = [
        ('Checking.\n<tool_call>\n{"name": "look", "arguments": {"room": "kitchen"}}\n'
         '</tool_call>\n<tool_call>\n<function=finish>\n<parameter=answer>\n4 2\n'
         '</parameter>\n</function>\n</tool_call>\n'),
        "a <tool_call>{broken}</tool_call> b <tool_c",
        "  spaced   <tool_call>\n{\"name\": \"x\"}\n</tool_call>  after  ",
        "no calls at all, trailing space ",
    ]
    for text in texts:
        content, calls = split_reply(text)
        for end in range(len(text) + 1):
            part, part_calls = split_reply(text[:end], final=False)
            assert content.startswith(part), (text, end, part)
            assert calls[: len(part_calls)] == part_calls
    assert split_reply(texts[0]) == ("Checking.", [
        model_module.ParsedCall("look", {"room": "kitchen"}),
        model_module.ParsedCall("finish", {"answer": "4 2"})])
    assert split_reply(texts[1]) == (texts[1], [])  # a block that does not parse stays text
    assert split_reply(texts[2])[0] == "  spacedafter  "
    assert split_reply(texts[3]) == (texts[3], [])


class ScriptedSampler:
    """Stands in for `generate`: every active row samples the next tokens of ``ids`` (up to the
    call's budget, through a stop token), after ``delay_s``. Records each call's active rows."""

    def __init__(self, ids, stop_ids, delay_s=0.0):
        self.ids, self.stop_ids, self.delay_s = list(ids), set(stop_ids), delay_s
        self.active, self.at = [], 0

    def __call__(self, params, cfg, prompt, positions, cache, key, *, max_tokens,
                 max_new_tokens, **_):
        time.sleep(self.delay_s)
        positions = np.asarray(positions)
        active = (positions >= 0).any(axis=1)
        self.active.append(active)
        self.at = 0 if max_tokens == 1 else self.at  # a new batch starts with one token
        take = self.ids[self.at: self.at + int(max_new_tokens)]
        stop = next((i for i, t in enumerate(take) if t in self.stop_ids), None)
        take = take if stop is None else take[: stop + 1]
        self.at += len(take)
        tokens = np.zeros((len(active), max_tokens), np.int32)
        tokens[active, : len(take)] = take
        lengths = np.where(active, len(take), 0).astype(np.int32)
        return Sampled(tokens, np.zeros(tokens.shape, np.float32), lengths, cache,
                       positions.max(axis=1) + len(take) + 1)


def test_streamed_tool_calls_equal_the_whole_reply_and_arrive_as_decoded(backend, client,
                                                                        monkeypatch):
    text = ('Let me check.\n<tool_call>\n{"name": "lookup", "arguments": {"q": "drawer"}}\n'
            '</tool_call>\n<tool_call>\n<function=finish>\n<parameter=answer>\nkey 1\n'
            '</parameter>\n</function>\n</tool_call>')
    ids = backend.tokenizer(text, add_special_tokens=False)["input_ids"]
    sampler = ScriptedSampler([*ids, min(backend.stop_set)], backend.stop_set, delay_s=0.02)
    monkeypatch.setattr(model_module, "generate", sampler)
    whole = ask(client, "hi", max_tokens=200)
    start, arrivals = time.perf_counter(), []
    chunks = []
    for chunk in ask(client, "hi", max_tokens=200, stream=True):
        chunks.append(chunk)
        arrivals.append(time.perf_counter() - start)
    streamed = collect(chunks)[0][0]
    message = whole.choices[0].message
    expected_content, expected_calls = parse_tool_calls(text)
    assert message.content == streamed["content"] == expected_content == "Let me check."
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls]
    assert calls == [(c.name, c.arguments) for c in expected_calls] == [
        ("lookup", '{"q": "drawer"}'), ("finish", '{"answer": "key 1"}')]
    assert [(c["name"], c["arguments"]) for c in streamed["calls"].values()] == calls
    assert whole.choices[0].finish_reason == streamed["finish"] == "tool_calls"
    assert whole.usage.completion_tokens == len(ids) + 1
    assert not any("<tool" in (c.choices[0].delta.content or "") for c in chunks if c.choices)
    first_text = next(t for t, c in zip(arrivals, chunks)
                      if c.choices and c.choices[0].delta.content)
    assert first_text < arrivals[-1] - 0.08  # the text came chunks before the end


ORDER_TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}}
    for name in ("get_order", "cancel_order")]


@pytest.mark.parametrize(("tool_choice", "opening", "written"), [
    ({"type": "function", "function": {"name": "get_order"}},
     '<tool_call>\n{"name": "get_order"', ', "arguments": {"order_id": "W7"}}\n</tool_call>'),
    ("required", '<tool_call>\n{"name": "',
     'get_order", "arguments": {"order_id": "W7"}}\n</tool_call>')])
def test_a_required_tool_call_starts_the_reply_inside_the_call(backend, client, monkeypatch,
                                                               tool_choice, opening, written):
    """The prompt ends with the template's opening of the call (of the named function, or up
    to the name), and what the model writes after it completes the call."""
    messages = [{"role": "user", "content": "where is W7?"}]
    ids = backend.tokenizer(written, add_special_tokens=False)["input_ids"]
    monkeypatch.setattr(model_module, "generate",
                        ScriptedSampler([*ids, min(backend.stop_set)], backend.stop_set))
    reply = client.chat.completions.create(model="tiny", messages=messages, tools=ORDER_TOOLS,
                                           tool_choice=tool_choice, max_tokens=64).choices[0]
    assert reply.finish_reason == "tool_calls" and not reply.message.content
    assert [(c.function.name, c.function.arguments) for c in reply.message.tool_calls] == [
        ("get_order", '{"order_id": "W7"}')]
    prompt, forced = backend.prompt_ids(ChatRequest(
        "tiny", tuple(messages), tools=tuple(ORDER_TOOLS), tool_choice="required",
        function=None if tool_choice == "required" else "get_order"))
    assert forced == opening and backend.tokenizer.decode(prompt).endswith(
        "<|im_start|>assistant\n" + opening)


def test_tool_choice_none_offers_no_tool_and_a_written_call_stays_text(backend, client,
                                                                        monkeypatch):
    written = '<tool_call>\n{"name": "get_order", "arguments": {}}\n</tool_call>'
    ids = backend.tokenizer(written, add_special_tokens=False)["input_ids"]
    monkeypatch.setattr(model_module, "generate",
                        ScriptedSampler([*ids, min(backend.stop_set)], backend.stop_set))
    reply = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], tools=ORDER_TOOLS,
        tool_choice="none", max_tokens=64).choices[0]
    assert (reply.message.content, reply.message.tool_calls) == (written, None)
    assert reply.finish_reason == "stop"
    prompt, forced = backend.prompt_ids(ChatRequest(
        "tiny", ({"role": "user", "content": "hi"},), tools=tuple(ORDER_TOOLS),
        tool_choice="none"))
    assert forced == "" and "get_order" not in backend.tokenizer.decode(prompt)


def test_a_tool_choice_the_tools_cannot_meet_is_a_400_and_a_model_is_found_by_its_id(client):
    for tools, tool_choice, said in [
            ([], "required", "offers none"),
            (ORDER_TOOLS, {"type": "function", "function": {"name": "refund"}},
             "a call of 'refund', but 'tools' offers 'get_order', 'cancel_order'"),
            (ORDER_TOOLS, "sometimes", "'tool_choice' must be 'auto', 'none', 'required'")]:
        with pytest.raises(openai.BadRequestError, match=re.escape(said)) as bad:
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}],
                tools=tools or openai.NOT_GIVEN, tool_choice=tool_choice)
        assert bad.value.body["param"] == "tool_choice"
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError, match="serves 'tiny'"):
        client.models.retrieve("qwen")


def test_a_client_that_leaves_mid_stream_frees_its_row(backend, client, monkeypatch):
    sampler = ScriptedSampler(backend.tokenizer("look " * 200, add_special_tokens=False)[
        "input_ids"], backend.stop_set, delay_s=0.05)
    monkeypatch.setattr(model_module, "generate", sampler)
    abandoned, batches = backend.abandoned_rows, backend.batches
    stream = ask(client, "hi", max_tokens=200, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    stream.close()  # the client goes away after its first text
    deadline = time.monotonic() + 10
    while backend.abandoned_rows == abandoned and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.abandoned_rows == abandoned + 1
    calls = len(sampler.active)
    assert calls < 1 + 200 // model_module.CHUNK_TOKENS  # its remaining decode never ran
    assert ask(client, "after", max_tokens=4).choices[0].message.content  # still served
    assert backend.batches == batches + 2 and len(sampler.active) <= calls + 2


# ------------------------------------------------------------------ n, log-probs, penalties


def reply_ids(backend, logprobs):
    """Token ids of a reply from its log-prob entries' bytes (byte-level pieces)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()
    return [backend.tokenizer.convert_tokens_to_ids("".join(chars[b] for b in t.bytes))
            for t in logprobs]


def test_n_logprobs_and_penalties_against_a_reference_forward(backend, client):
    """A seeded request for two sampled choices with log-probs and penalties: reproducible,
    streamed equal to whole, and each token's log-prob (and top 3) those of
    softmax((logits - penalties) / T) from a full forward of the prompt and reply, where the
    penalties count the choice's earlier tokens (OpenAI's definitions)."""
    temperature, presence, frequency = 0.7, -2.0, 0.5
    options = dict(temperature=temperature, seed=5, n=2, max_tokens=12, logprobs=True,
                   top_logprobs=3, presence_penalty=presence, frequency_penalty=frequency)
    whole = ask(client, "open drawer 2", **options)
    again = ask(client, "open drawer 2", **options)
    streamed, _ = collect(ask(client, "open drawer 2", stream=True, **options))
    assert [c.index for c in whole.choices] == [0, 1]
    assert whole.choices[0].message.content != whole.choices[1].message.content
    prompt, _ = backend.prompt_ids(ChatRequest("tiny", ({"role": "user",
                                                      "content": "open drawer 2"},)))
    replies = [reply_ids(backend, c.logprobs.content) for c in whole.choices]
    assert [len(ids) for ids in replies] == [12, 12]  # no stop token: one forward for both
    full = np.asarray([prompt + ids for ids in replies], np.int32)
    every, _ = qwen.forward(backend.params, backend.cfg, full,
                            np.broadcast_to(np.arange(full.shape[1], dtype=np.int32), full.shape))
    for choice, repeat, ids in zip(whole.choices, again.choices, replies):
        assert choice.message.content == repeat.message.content
        assert choice.message.content == streamed[choice.index]["content"]
        entries = choice.logprobs.content
        assert [t.token for t in entries] == [t.token for t in streamed[choice.index]["logprobs"]]
        logits = np.asarray(every, np.float64)[choice.index, len(prompt) - 1: -1]
        seen = np.zeros(backend.cfg.vocab_size)
        for t, (token, entry) in enumerate(zip(ids, entries)):
            scaled = (logits[t] - frequency * seen - presence * (seen > 0)) / temperature
            logp = scaled - scaled.max() - np.log(np.exp(scaled - scaled.max()).sum())
            assert entry.logprob == pytest.approx(logp[token], abs=2e-4)
            top = np.argsort(-logp)[:3]
            assert [x.logprob for x in entry.top_logprobs] == pytest.approx(logp[top], abs=2e-4)
            assert reply_ids(backend, entry.top_logprobs) == top.tolist()
            seen[token] += 1
    # the penalty's effect: a greedy reply encouraged to repeat itself is another reply
    greedy = dict(temperature=0.0, max_tokens=12)
    plain = ask(client, "open drawer 2", **greedy).choices[0].message.content
    pushed = ask(client, "open drawer 2", n=2, logprobs=True, top_logprobs=3,
                 presence_penalty=presence, frequency_penalty=frequency, **greedy)
    assert pushed.choices[0].message.content == pushed.choices[1].message.content != plain


def test_chat_template_arguments_from_the_backend_and_the_request(backend, folder, monkeypatch):
    monkeypatch.setattr(backend.tokenizer, "chat_template",
                        "{{ '<|im_start|>' + ('think' if enable_thinking else 'answer') + "
                        "(messages[0].content | string) }}")
    request = ChatRequest("tiny", ({"role": "user", "content": " now"},))

    def rendered(request):
        return backend.tokenizer.decode(backend.prompt_ids(request)[0])

    assert rendered(request) == "<|im_start|>answer now"
    monkeypatch.setattr(backend, "template_kwargs", {"enable_thinking": True})
    assert rendered(request) == "<|im_start|>think now"
    off = ChatRequest("tiny", request.messages, template_kwargs={"enable_thinking": False})
    assert rendered(off) == "<|im_start|>answer now"  # the request's argument wins
    with pytest.raises(ValueError, match="'thinking' is not one the model's chat template"):
        ModelBackend(folder, template_kwargs={"thinking": False})


def test_the_command_line_checks_its_chat_setting(folder, capsys):
    from prover_jax.server.__main__ import main

    for argument, message in (("chat.template.enable_thinking=false",
                               "'enable_thinking' is not one"),
                              ("chat.template.enable_thinking", "expected dotted.key=value"),
                              ("chat.template.enable_thinking=[", "is not YAML"),
                              ("chat.reply=prose", "chat.reply must be one of"),
                              ("sampling.temperature=0", "only chat.* settings")):
        with pytest.raises(SystemExit):
            main(["--model", str(folder), "--set", argument])
        assert message in capsys.readouterr().err


def prompt_of(backend, text):
    request = [{"role": "user", "content": text}]
    prompt = backend.tokenizer.apply_chat_template(request, add_generation_prompt=True,
                                                   tokenize=True)
    return list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)


def test_a_request_that_arrives_mid_batch_joins_it_token_for_token(backend, client,
                                                                   monkeypatch):
    """A greedy request decoding a long reply (each chunk slowed down), and one that arrives
    once its first text is out: the second joins the running batch in a spare row at the next
    chunk (no second batch), its prompt prefilled there while the first row keeps its cache,
    and both replies are the sampler's own solo greedy decodes."""
    long = next(text for text in (f"open cabinet {i}" for i in range(40))
                if len(backend.tokenizer(solo_greedy(backend, prompt_of(backend, text), 64))[
                    "input_ids"]) >= 48)  # no stop token early on: the batch runs a while
    real = model_module.generate

    def slowed(*args, **kwargs):
        time.sleep(0.1)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_module, "generate", slowed)
    batches, joins = backend.batches, backend.joins
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream = ask(client, long, temperature=0.0, max_tokens=64, stream=True)
        chunks = iter(stream)
        first = [next(c for c in chunks if c.choices and c.choices[0].delta.content)]
        late = pool.submit(ask, client, "take key 1", temperature=0.0, max_tokens=8)
        rest = list(chunks)
        reply = late.result()
    assert backend.batches == batches + 1 and backend.joins == joins + 1
    streamed = collect([*first, *rest])[0][0]["content"]
    assert streamed == solo_greedy(backend, prompt_of(backend, long), 64)
    assert reply.choices[0].message.content == solo_greedy(
        backend, prompt_of(backend, "take key 1"), 8)
