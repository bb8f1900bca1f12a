"""A tiny random Qwen3 as the rollout policy on household, with a tokenizer trained here."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from models import qwen
from models.qwen.chat import END_OF_TURN
from prover_jax.model_policy import ModelPolicy, SamplingConfig, parse_action
from prover_jax.rollout import run, start
from tests.models.test_chat import trained_tokenizer  # noqa: F401 - a fixture


def test_parse_action():
    call = {"name": "act", "arguments": {"action": "go to fridge 1"}}
    assert parse_action(f"<tool_call>\n{json.dumps(call)}\n</tool_call>") == "go to fridge 1"
    assert parse_action("<think>hm</think>\nlook") == "look"
    assert parse_action("<tool_call>{not json}</tool_call> look") == \
        "<tool_call>{not json}</tool_call> look"
    other = {"name": "other", "arguments": {"action": "x"}}
    assert parse_action(f"<tool_call>{json.dumps(other)}</tool_call>"
                        f"<tool_call>{json.dumps(call)}</tool_call>") == "go to fridge 1"
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingConfig(max_new_tokens=0)


def test_parse_action_never_raises_on_model_output():
    deep = "[" * 1000 + "]" * 1000
    for reply in (f"<tool_call>{deep}</tool_call>", "<tool_call>[1, 2]</tool_call>",
                  '<tool_call>{"name": "act", "arguments": ' + deep + "}</tool_call>"):
        assert parse_action(reply) == reply


def _policy(tokenizer, temperature=1.0):
    cfg = qwen.QwenConfig(model_type="qwen3", vocab_size=len(tokenizer), hidden_size=32,
                          intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2,
                          head_dim=8, qk_norm=True)
    params = qwen.init_numpy(cfg, scale=0.1)
    sampling = SamplingConfig(max_new_tokens=8, temperature=temperature, min_prompt_tokens=256)
    return ModelPolicy(params, cfg, tokenizer, "You are a household agent.", sampling)


def test_model_policy_rolls_out_household(trained_tokenizer):  # noqa: F811
    policy = _policy(trained_tokenizer)
    tasks = [envs.Task("household", "train", i) for i in range(3)]
    with EnvPool("household", 4, num_workers=1) as pool:
        episodes = run(pool, policy, [start(t) for t in tasks], random.Random(0), max_actions=2)
        again = run(pool, policy, [start(t) for t in tasks], random.Random(0), max_actions=2)
    assert episodes == again  # deterministic for the same rng
    stop = trained_tokenizer.convert_tokens_to_ids(END_OF_TURN)
    for episode in episodes:
        assert episode.num_turns == 2
        for action in episode.actions:
            assert 1 <= len(action.token_ids) <= 8 == policy.sampling.max_new_tokens
            assert len(action.logprobs) == len(action.token_ids)
            assert all(np.isfinite(action.logprobs)) and max(action.logprobs) <= 0
            assert stop not in action.token_ids[:-1]  # a reply ends at its first end of turn
    # The second prompt contains the first action as an act tool call and its observation.
    text = trained_tokenizer.decode(policy.prompt(episodes[0].prefix(1)).tolist())
    assert episodes[0].observations[1] in text and text.rstrip().endswith("assistant")
