"""The choice probe: household-pivot's first choices among look-alikes, and the teacher-forced
probability of a reply there, which equals the sampler's own for the replies it sampled."""

from __future__ import annotations

import dataclasses
import functools
import random

import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from prover_jax.choice_probe import choice_probabilities, choice_probes, probe_score
from prover_jax.demonstrations import DemonstrationPolicy
from prover_jax.learner import Learner
from prover_jax.model_policy import ModelPolicy
from prover_jax.rollout import run
from prover_jax.run_settings import TinyModel
from prover_jax.settings import ChatConfig, SamplingConfig
from prover_jax.trainer import tiny

ENV = "household-pivot"


@pytest.fixture(scope="module")
def setting():
    env = envs.make(ENV)
    cfg, params, tokenizer = tiny(env, TinyModel(vocab_size=512, tokenizer_episodes=10))
    demonstrator = DemonstrationPolicy(tokenizer, env.instruction(), ChatConfig())
    with EnvPool(ENV, 4, num_workers=1) as pool:
        probes = choice_probes(pool, demonstrator, env, env.tasks("eval")[:8],
                               random.Random(0), demonstrator.reply_ids)
        policy = ModelPolicy(params, cfg, tokenizer, env.instruction(),
                             SamplingConfig(max_new_tokens=16))
        sampled = run(pool, policy, [p.prefix for p in probes], random.Random(1),
                      max_actions=1)
    return env, cfg, params, demonstrator, probes, sampled


def test_probes_are_first_choices_among_lookalikes(setting):
    env, _, _, _, probes, _ = setting
    assert len(probes) == 8 and any(p.right for p in probes) and not all(p.right for p in probes)
    for probe in probes:
        state = probe.prefix.states[-1]
        assert env.oracle_choice(state) == (probe.action, probe.right)
        assert all(env.oracle_choice(s) is None for s in probe.prefix.states[:-1])
        assert probe.action.startswith("take ") and probe.context_ids


def test_teacher_forced_probability_is_the_samplers(setting):
    _, cfg, params, demonstrator, probes, sampled = setting
    learner = Learner(cfg)
    replies = [dataclasses.replace(p, reply_ids=e.actions[-1].token_ids)
               for p, e in zip(probes, sampled)]
    forced = choice_probabilities(functools.partial(learner.logprobs, params), replies,
                                  demonstrator.format.end_of_turn, cfg.max_position_embeddings,
                                  batch_size=3)
    expected = [sum(e.actions[-1].logprobs) for e in sampled]  # 16 tokens of a random model
    np.testing.assert_allclose(np.log(forced), expected, atol=2e-2)
    # a random model gives the probe's own reply a small, non-zero probability
    own = choice_probabilities(functools.partial(learner.logprobs, params), probes,
                               demonstrator.format.end_of_turn, cfg.max_position_embeddings)
    assert ((0 < own) & (own < 0.5)).all()
    right = np.array([p.right for p in probes])
    assert probe_score(own, probes) == pytest.approx(
        np.mean(np.where(right, own, 1 - own)))


def test_an_environment_without_a_choice_oracle_is_refused(setting):
    _, _, _, demonstrator, _, _ = setting
    with EnvPool("household-small", 1, num_workers=1) as pool, pytest.raises(
            ValueError, match="no choice oracle"):
        choice_probes(pool, demonstrator, envs.make("household-small"), [], random.Random(0),
                      demonstrator.reply_ids)
