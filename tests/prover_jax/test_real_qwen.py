"""A real Qwen's path end to end: the real Qwen3 tokenizer and chat template on tiny random
weights in the real architecture, through SFT, RL with prover+vict, evaluation and the server,
each stage using the chat setting stored with the model it starts from."""

from __future__ import annotations

import json
import random
import shutil

import jax
import openai
import pytest

import envs
from envs.pool import EnvPool
from models import qwen
from models.qwen import chat
from prover_jax import evaluate, evaluation, runs
from prover_jax.demonstrations import DemonstrationPolicy, demonstrations
from prover_jax.learner import LearnerConfig, OptimizerConfig
from prover_jax.model_policy import ModelPolicy, parse_action
from prover_jax.rollout import run, start
from prover_jax.run_settings import SftConfig, TinyModel, TrainConfig
from prover_jax.server import ChatRequest, serve
from prover_jax.server.model import ModelBackend
from prover_jax.settings import ChatConfig, EvalConfig, SamplingConfig
from prover_jax.sft_trainer import sft
from prover_jax.trainer import tiny_model, train
from tests.models.test_chat import qwen3_files

ENV = "household-small"
CHAT = ChatConfig("tool_call", {"enable_thinking": False})
NO_THINKING_PROMPT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
LEARNER = LearnerConfig(optimizer=OptimizerConfig(learning_rate=1e-3), compute_dtype="float32",
                        logits_chunk=256)
SHAPE = TinyModel(hidden_size=32, layers=1, heads=2, kv_heads=1, head_dim=16,
                  intermediate_size=64)


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory):
    """A Hugging Face folder: the real Qwen3 tokenizer, tiny random Qwen3 weights over its
    whole vocabulary."""
    folder = tmp_path_factory.mktemp("qwen3")
    for file in qwen3_files().iterdir():
        shutil.copy(file, folder / file.name)
    tokenizer = chat.load_tokenizer(folder)
    cfg, params = tiny_model(len(tokenizer), 0, SHAPE)
    qwen.save(folder, cfg, params)
    return folder


def test_demonstrations_and_rollouts_are_written_in_the_stored_setting(qwen3_folder):
    cfg, params, tokenizer = runs.load(qwen3_folder)
    env = envs.make(ENV)
    form = chat.AgentFormat(tokenizer, env.instruction(), CHAT.reply, CHAT.template)
    task = env.tasks("train")[0]
    with EnvPool(ENV, 2, num_workers=1) as pool:
        [demo] = demonstrations(pool, DemonstrationPolicy(tokenizer, env.instruction(), CHAT),
                                [task], random.Random(0), 2)
        policy = ModelPolicy(params, cfg, tokenizer, env.instruction(),
                             SamplingConfig(max_new_tokens=6), CHAT)
        [sampled] = run(pool, policy, [start(task)], random.Random(0), 2)
    system = [{"role": "system", "content": env.instruction()},
              {"role": "user", "content": demo.observations[0]}]
    prompt = tokenizer.apply_chat_template(system, tools=[chat.ACT_TOOL], tokenize=False,
                                           add_generation_prompt=True, **CHAT.template)
    for episode in (demo, sampled):
        stream = episode.stream()
        text = tokenizer.decode(stream.tokens)
        assert text.startswith(prompt) and prompt.endswith(NO_THINKING_PROMPT)
        # token in, token out: the trained tokens are exactly the replies' ids
        assert stream.tokens[stream.loss_mask].tolist() == [
            t for action in episode.actions for t in action.token_ids]
        for action, observation in zip(episode.actions[:-1], episode.observations[1:]):
            block = tokenizer.decode(form.after_reply(action.token_ids, observation))
            assert block in text and block.endswith(NO_THINKING_PROMPT)
    for action in demo.actions:
        reply = tokenizer.decode(action.token_ids)
        assert reply.startswith("<tool_call>\n{") and reply.endswith("</tool_call><|im_end|>")
        assert parse_action(reply.removesuffix("<|im_end|>")) == action.text


@pytest.mark.slow
def test_sft_rl_evaluation_and_serving_use_the_stored_chat_setting(qwen3_folder, tmp_path,
                                                                   monkeypatch):
    cfg, params, tokenizer = runs.load(qwen3_folder)
    small_eval = EvalConfig(tasks=1, samples=0, max_new_tokens=4, max_actions=1)
    sft_dir = tmp_path / "sft"
    sft(SftConfig(env=ENV, init=str(qwen3_folder), chat=CHAT, demonstrations=2, heldout=1,
                  steps=2, batch_size=2, max_actions=2, workers=1, eval_every=0,
                  run_dir=str(sft_dir), evaluation=small_eval, learner=LEARNER),
        cfg, params, tokenizer, log=lambda line: None)
    assert runs.stored_chat(sft_dir) == CHAT

    used = []

    class Recording(ModelPolicy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            used.append((self.format.reply, self.format.template_kwargs))

    monkeypatch.setattr("prover_jax.trainer.ModelPolicy", Recording)
    monkeypatch.setattr(evaluation, "ModelPolicy", Recording)
    rl_dir = tmp_path / "rl"
    cfg, params, tokenizer = runs.load(sft_dir)
    logged = []
    train(TrainConfig(env=ENV, credit="prover+vict", init=str(sft_dir), steps=2, groups=1,
                      group_size=2, max_actions=2, workers=1, run_dir=str(rl_dir),
                      sampling=SamplingConfig(max_new_tokens=6), learner=LEARNER,
                      evaluation=small_eval),
          cfg, params, tokenizer, log=logged.append)
    assert runs.stored_chat(rl_dir) == CHAT
    assert json.loads((rl_dir / "config.json").read_text())["chat"] == {
        "reply": "tool_call", "template": {"enable_thinking": False}}
    assert not any("warning: chat" in line for line in logged)
    assert used and set(map(repr, used)) == {repr(("tool_call", {"enable_thinking": False}))}

    used.clear()
    evaluate.main([str(rl_dir), "--tasks", "1", "--samples", "0", "--max-actions", "1",
                   "--max-new-tokens", "4", "--workers", "1"])
    assert used == [("tool_call", {"enable_thinking": False})]
    exported = runs.export(rl_dir, tmp_path / "exported")
    assert runs.stored_chat(exported) == CHAT
    assert jax.tree.structure(runs.load(exported)[1]) == jax.tree.structure(params)

    backend = ModelBackend(rl_dir, name="tiny-qwen3")  # the server, on the stored setting
    try:
        with serve(backend) as base_url:
            client = openai.OpenAI(base_url=base_url, api_key="unused")
            question = [{"role": "user", "content": "Which room?"}]
            reply = client.chat.completions.create(model="tiny-qwen3", messages=question,
                                                   max_tokens=3, temperature=0)
            streamed = "".join(
                chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
                    model="tiny-qwen3", messages=question, max_tokens=3, temperature=0,
                    stream=True) if chunk.choices)
    finally:
        backend.close()
    assert backend.template_kwargs == {"enable_thinking": False}
    prompt = tokenizer.decode(backend.prompt_ids(ChatRequest("tiny-qwen3", tuple(question)))[0])
    assert prompt.endswith(NO_THINKING_PROMPT)
    assert reply.usage.prompt_tokens == len(tokenizer(prompt)["input_ids"])
    assert streamed == (reply.choices[0].message.content or "")
