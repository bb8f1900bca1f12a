"""A tiny random Qwen3 as the rollout policy on household, with a tokenizer trained here."""

from __future__ import annotations

import json
import random

import jax
import numpy as np
import pytest

import envs
from envs.pool import EnvPool
from models import qwen
from models.qwen.chat import END_OF_TURN
from prover_jax.batch import bucket
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


CFG = qwen.QwenConfig(model_type="qwen3", vocab_size=400, hidden_size=32,
                      intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2,
                      head_dim=8, qk_norm=True, max_position_embeddings=4096)
PARAMS = qwen.init_numpy(CFG, scale=0.1)


def _policy(tokenizer, temperature=1.0, params=PARAMS, **sampling):
    assert len(tokenizer) <= CFG.vocab_size
    sampling = SamplingConfig(**{"max_new_tokens": 8, "temperature": temperature,
                                 "min_prompt_tokens": 256, **sampling})
    return ModelPolicy(params, CFG, tokenizer, "You are a household agent.", sampling)


@pytest.fixture(scope="module")
def pool():
    with EnvPool("household", 4, num_workers=1) as pool:
        yield pool


TASKS = [envs.Task("household", "train", i) for i in range(3)]


def test_model_policy_rolls_out_household(trained_tokenizer, pool):  # noqa: F811
    policy = _policy(trained_tokenizer)
    episodes = run(pool, policy, [start(t) for t in TASKS], random.Random(0), max_actions=2)
    again = run(pool, _policy(trained_tokenizer), [start(t) for t in TASKS], random.Random(0),
                max_actions=2)
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


def test_an_episode_with_its_own_stream_samples_the_same_in_any_batch(trained_tokenizer,  # noqa: F811
                                                                    pool):
    """With a random stream per episode, an episode's sampled replies do not depend on which
    others share its batch or where it sits (what lets processes split a step's groups)."""
    policy = _policy(trained_tokenizer)
    streams = lambda seeds: [random.Random(seed) for seed in seeds]  # noqa: E731
    together = run(pool, policy, [start(t) for t in TASKS], streams([10, 11, 12]),
                   max_actions=3)
    apart = run(pool, policy, [start(TASKS[2]), start(TASKS[0])], streams([12, 10]),
                max_actions=3)
    for ours, theirs in zip(apart, [together[2], together[0]]):
        assert ours.stream().tokens.tolist() == theirs.stream().tokens.tolist()
        np.testing.assert_allclose(ours.stream().logprobs, theirs.stream().logprobs, atol=1e-5)
    other = run(pool, policy, [start(TASKS[0])], streams([13]), max_actions=3)
    assert other[0].stream().tokens.tolist() != together[0].stream().tokens.tolist()


def test_the_stream_is_exactly_what_was_read_and_sampled(trained_tokenizer, pool):  # noqa: F811
    """Replies of a random model are non-canonical (no tool call, cut at max_new_tokens); the
    stream holds them as sampled, each followed by the template's observation block."""
    policy = _policy(trained_tokenizer)
    episodes = run(pool, policy, [start(t) for t in TASKS], random.Random(3), max_actions=3)
    for episode in episodes:
        stream = episode.stream()
        sampled = [i for a in episode.actions for i in a.token_ids]
        assert stream.tokens[stream.loss_mask].tolist() == sampled
        np.testing.assert_array_equal(stream.logprobs[stream.loss_mask],
                                      np.concatenate([a.logprobs for a in episode.actions]))
        assert not stream.logprobs[~stream.loss_mask].any()
        assert stream.turn_ids[stream.loss_mask].tolist() == [
            t for t, a in enumerate(episode.actions) for _ in a.token_ids]
        contexts = [policy.format.prompt(episode.observations[0]).tolist()] + [
            policy.format.after_reply(a.token_ids, o).tolist()
            for a, o in zip(episode.actions, episode.observations[1:])]
        assert [list(a.context_ids) for a in episode.actions] == contexts[:-1]
        assert stream.tokens.tolist() == [i for a in episode.actions
                                          for i in a.context_ids + a.token_ids]
        assert policy.prompt(episode).tolist() == stream.tokens.tolist() + contexts[-1]
    # a reply cut at max_new_tokens is closed by an end-of-turn token the model did not sample
    end = policy.format.end_of_turn
    pairs = [(a, b) for e in episodes for a, b in zip(e.actions, e.actions[1:])]
    assert any(a.token_ids[-1] != end for a, _ in pairs)
    for before, after in pairs:
        assert (after.context_ids[0] == end) == (before.token_ids[-1] != end)


def test_a_kept_cache_samples_what_a_fresh_prefill_samples(trained_tokenizer, pool):  # noqa: F811
    """Greedy rollouts with the cache kept across turns (and prompts shared by a group) and
    with every stream prefilled afresh each turn produce the same tokens."""
    starts = [start(t) for t in TASKS[:2] for _ in range(2)]
    kept, fresh = (_policy(trained_tokenizer, 0.0, reuse_cache=reuse) for reuse in (True, False))
    ours = run(pool, kept, starts, random.Random(0), max_actions=4)
    reference = run(pool, fresh, starts, random.Random(0), max_actions=4)
    for a, b in zip(ours, reference):
        assert a.stream().tokens.tolist() == b.stream().tokens.tolist()
        np.testing.assert_allclose(a.stream().logprobs, b.stream().logprobs, atol=1e-5)
    assert kept.stats.generated == fresh.stats.generated
    # the fresh path prefills every stream whole at every turn; the kept one each context once,
    # the two episodes of a task sharing all of their prompt but the last token
    contexts = sum(len(a.context_ids) for e in ours for a in e.actions)
    shared = sum(len(e.actions[0].context_ids) - 1 for e in ours[1::2])
    assert kept.stats.prefilled == contexts - shared
    assert fresh.stats.prefilled == sum(len(e.prefix(t).stream().tokens) if t else 0
                                        for e in reference for t in range(4)) + contexts
    # continuing prefixes (restored states, shared prefills) replays the greedy episodes
    prefixes = [e.prefix(t) for e in ours for t in (1, 2)]
    replayed = run(pool, kept, prefixes, random.Random(1), max_actions=3)
    for i, (prefix, episode) in enumerate(zip(prefixes, replayed)):
        original = ours[i // 2]
        assert episode.actions[: prefix.num_turns] == prefix.actions
        assert episode.prefix(4).stream().tokens.tolist() == original.stream().tokens.tolist()
    # the prefixes' whole streams needed a larger cache; it was cut back to what the last
    # call's rows needed: the longest stream and one more tail and reply
    needed = kept.sampling.min_prompt_tokens + kept.sampling.max_new_tokens
    assert kept.cache_slots <= bucket(max(len(e.stream().tokens) for e in replayed) + needed)


def test_context_overflow_ends_an_episode_as_truncated(trained_tokenizer, pool):  # noqa: F811
    policy = _policy(trained_tokenizer, max_new_tokens=8)
    prompt = len(policy.format.prompt(envs.make("household").reset(TASKS[0])))
    tight = _policy(trained_tokenizer, max_context=prompt + 8 + 20)  # one turn, not two
    episode = run(pool, tight, [start(TASKS[0])], random.Random(0), max_actions=3)[0]
    assert episode.num_turns == 1
    assert episode.done and episode.truncated and episode.overflow
    assert tight.stats.overflows == 1
    assert len(episode.stream().tokens) <= prompt + 8
    with pytest.raises(ValueError, match="max_position_embeddings"):
        _policy(trained_tokenizer, max_context=CFG.max_position_embeddings + 1)
    with pytest.raises(ValueError, match="no room"):
        SamplingConfig(max_new_tokens=8, max_context=8)


@pytest.mark.parametrize("decode_chunk", [0, 3])
def test_on_a_mesh_each_device_samples_its_rows_and_the_episodes_are_the_same(
        trained_tokenizer, pool, decode_chunk):  # noqa: F811
    from tpu.mesh import MeshConfig, build_mesh, to_sampler

    mesh = build_mesh(MeshConfig(data=2, fsdp=2, model=2))
    alone = run(pool, _policy(trained_tokenizer), [start(t) for t in TASKS], random.Random(0),
                max_actions=2)
    policy = _policy(trained_tokenizer, params=to_sampler(PARAMS, CFG, mesh),
                     decode_chunk=decode_chunk)
    assert policy.mesh is mesh
    spread = run(pool, policy, [start(t) for t in TASKS], random.Random(0), max_actions=2)
    rows = policy._cache.valid
    assert rows.addressable_shards[0].data.shape[0] == rows.shape[0] // 4  # data x fsdp
    for ours, theirs in zip(spread, alone):
        assert ours.stream().tokens.tolist() == theirs.stream().tokens.tolist()
        np.testing.assert_allclose(ours.stream().logprobs, theirs.stream().logprobs, atol=1e-4)


def early_stopping_params(tokenizer, logit: float = 1.3):
    """PARAMS with every token's embedding 3 in its first dimension and the end-of-turn
    token's head weight `logit` there: replies end after 1 to 12 tokens, unevenly."""
    params = {**PARAMS, "embed": np.array(PARAMS["embed"]), "lm_head": np.array(PARAMS["lm_head"])}
    params["embed"][:, 0] = 3.0
    params["lm_head"][0, tokenizer.convert_tokens_to_ids(END_OF_TURN)] = logit
    return params


def test_continuous_decoding_samples_what_turn_by_turn_decoding_samples(
        trained_tokenizer, pool):  # noqa: F811
    """Decoding 3 tokens per call, rows taking their episode's next turn (or a waiting
    episode, 6 for 4 slots) between calls, samples the same replies with the same log-probs
    as decoding each turn's replies in one call: the keys are drawn per reply, and each token
    with its place in the reply. Restored prefixes too. Replies of uneven length leave fewer
    rows idle."""
    starts = [start(t) for t in TASKS for _ in range(2)]
    params = early_stopping_params(trained_tokenizer)

    def both(episodes, seed):
        return [(run(pool, policy, episodes, [random.Random(seed + i) for i in
                                              range(len(episodes))], max_actions=4), policy)
                for policy in (_policy(trained_tokenizer, params=params, max_new_tokens=12,
                                       decode_chunk=chunk) for chunk in (0, 3))]

    (reference, turns), (ours, chunks) = both(starts, 20)
    for a, b in zip(ours, reference):
        assert a.stream().tokens.tolist() == b.stream().tokens.tolist()
        np.testing.assert_allclose(a.stream().logprobs, b.stream().logprobs, atol=1e-5)
        assert a.valid == b.valid and a.observations == b.observations
    # what the learner will score: every stream in one forward pass, no cache
    streams = [e.stream() for e in ours]
    tokens = np.zeros((len(streams), max(len(s.tokens) for s in streams)), np.int32)
    for row, stream in enumerate(streams):
        tokens[row, : len(stream.tokens)] = stream.tokens
    logits, _ = jax.jit(qwen.forward, static_argnums=1)(
        params, CFG, tokens, np.broadcast_to(np.arange(tokens.shape[1]), tokens.shape))
    scored = np.asarray(jax.nn.log_softmax(logits[:, :-1]))
    for row, stream in enumerate(streams):
        length = len(stream.tokens)
        picked = scored[row, np.arange(length - 1), stream.tokens[1:]]
        np.testing.assert_allclose(stream.logprobs[1:][stream.loss_mask[1:]],
                                   picked[stream.loss_mask[1:]], atol=2e-5)
    lengths = [len(a.token_ids) for e in ours for a in e.actions]
    assert min(lengths) < 4 and max(lengths) == 12  # uneven: some replies span 4 calls
    assert chunks.stats.generated == turns.stats.generated == sum(lengths)
    assert sum(lengths) <= chunks.stats.row_steps < 0.8 * turns.stats.row_steps
    # the last calls decoded the last episodes alone: the cache's rows shrank to fit them
    assert chunks.cache_rows < turns.cache_rows == pool.num_slots
    prefixes = [e.prefix(t) for e in reference[::2] for t in (1, 2)]
    (reference, _), (ours, _) = both(prefixes, 40)
    for a, b in zip(ours, reference):
        assert a.stream().tokens.tolist() == b.stream().tokens.tolist()
        np.testing.assert_allclose(a.stream().logprobs, b.stream().logprobs, atol=1e-5)
    with pytest.raises(ValueError, match="decode_chunk"):
        SamplingConfig(decode_chunk=4, reuse_cache=False)
