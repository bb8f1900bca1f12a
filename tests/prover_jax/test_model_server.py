"""The local model behind the OpenAI-compatible server, through the real `openai` client over
HTTP on loopback: replies equal the sampler's own decode whatever the batch, batching,
limits and errors, the judge, critic and tau's simulated user on it, and a clean shutdown."""

from __future__ import annotations

import concurrent.futures
import json
import random
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
from models.qwen.sampler import generate
from prover_jax.judges.agentic import AgenticConfig, AgenticJudge
from prover_jax.judges.critic import Critic, CriticConfig
from prover_jax.server import ChatRequest, serve
from prover_jax.server.model import ModelBackend, parse_tool_calls
from prover_jax.train import TinyModel
from prover_jax.trainer import tiny
from tests.prover_jax.test_judges import FAILURES, SUCCESS

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


def test_concurrent_requests_share_decodes_and_equal_solo_decodes(backend, client):
    texts = [f"go to drawer {i}" for i in range(8)]  # one prompt length: one solo program
    before = backend.generate_calls
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda t: ask(client, t, temperature=0.0, max_tokens=12), texts))
    assert backend.generate_calls - before < 8  # batched
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
    text = backend.tokenizer.decode(backend.prompt_ids(request))
    assert '"name": "get_segment"' in text and text.endswith("<|im_start|>assistant\n")


def test_a_seed_gives_the_same_sample(client):
    first, second = (ask(client, "hello", temperature=1.0, seed=7, max_tokens=8)
                     for _ in range(2))
    assert first.choices[0].message.content == second.choices[0].message.content


def test_bad_requests_are_400s_naming_the_problem(backend, client):
    with pytest.raises(openai.BadRequestError, match="exceed the context"):
        ask(client, "look " * 20, max_tokens=backend.context)
    with pytest.raises(openai.BadRequestError, match="'logprobs' is not supported"):
        ask(client, "hi", logprobs=True)
    with pytest.raises(openai.BadRequestError, match="'temperature' must be a number"):
        ask(client, "hi", temperature="hot")


def test_full_queue_is_a_503_a_gone_client_frees_its_place_and_a_crash_is_a_500(
        folder, monkeypatch):
    model = ModelBackend(folder, name="tiny", queue_capacity=2)
    release, decode, decoded = threading.Event(), model.decode, []

    def held(jobs):
        decoded.extend(job.request.messages[0]["content"] for job in jobs)
        return release.wait(60) and decode(jobs)

    monkeypatch.setattr(model, "decode", held)
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
