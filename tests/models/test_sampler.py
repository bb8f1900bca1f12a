"""The jitted sampler: greedy parity with transformers, determinism, stops, budgets, caches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from models import qwen
from models.qwen.sampler import compiled_generate, first_max, generate, sampling_params
from tests.models.test_qwen_parity import CONFIGS, TINY, randomise

MAX_TOKENS = 8


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5"])
def tiny(request, tmp_path_factory):
    torch.manual_seed(0)
    config = (transformers.Qwen3Config(**TINY, head_dim=16) if request.param == "qwen3"
              else CONFIGS["qwen3_5"]())
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    randomise(model, seed=7)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    cfg, params = qwen.load(folder)
    return model, cfg, params


def prompts(cfg, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, cfg.vocab_size, (3, 6)).astype(np.int32)
    mask = np.ones((3, 6), bool)
    mask[1, :2] = False
    mask[2, :4] = False
    return np.where(mask, tokens, 0).astype(np.int32), mask


# every knob an array, so runs that differ only in their values share one compiled program
KNOBS = dict(temperature=jnp.float32(1.0), top_k=jnp.int32(0), top_p=jnp.float32(1.0))


def run(params, cfg, tokens, mask, key=0, budget=MAX_TOKENS, stop=(-1,), **knobs):
    """`generate` with a seed (an int) or a key array per row for `key`."""
    # room for a continuation too (test_continuing_reuses_the_cache)
    cache = qwen.init_cache(cfg, tokens.shape[0], tokens.shape[1] + 2 * MAX_TOKENS + 8)
    return generate(params, cfg, tokens, qwen.positions_from_mask(mask), cache,
                    jax.random.key(key) if isinstance(key, int) else key, max_tokens=MAX_TOKENS,
                    max_new_tokens=jnp.int32(budget), stop_tokens=jnp.array(stop, jnp.int32),
                    **{**KNOBS, **knobs})


def test_greedy_equals_transformers_generate(tiny):
    model, cfg, params = tiny
    tokens, mask = prompts(cfg)
    out = run(params, cfg, tokens, mask, temperature=jnp.float32(0.0))
    with torch.no_grad():
        expected = model.generate(torch.tensor(tokens.astype(np.int64)),
                                  attention_mask=torch.tensor(mask.astype(np.int64)),
                                  max_new_tokens=MAX_TOKENS, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)
    np.testing.assert_array_equal(np.asarray(out.tokens), expected[:, 6:].numpy())
    assert np.asarray(out.lengths).tolist() == [MAX_TOKENS] * 3


def test_prepared_params_are_per_layer_copies_on_cpu(tiny, tmp_path):
    _, cfg, params = tiny
    prepared = sampling_params(params, cfg)
    assert sampling_params(prepared, cfg) is prepared
    if jax.default_backend() != "cpu":
        assert prepared is params
        return
    for group in ("layers", "attn", "linear"):
        if group not in params:
            continue
        assert len(prepared[group]) == len(jax.tree.leaves(params[group])[0])
        for i, layer in enumerate(prepared[group]):
            for name, leaf in layer.items():
                np.testing.assert_array_equal(np.asarray(leaf), np.asarray(params[group][name][i]))
    with pytest.raises(ValueError, match="per-layer"):
        qwen.save(tmp_path, cfg, prepared)


def test_tied_embeddings_sample_through_a_copied_head(tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS["qwen3-tied"]()).eval()
    randomise(model, seed=5)
    model.save_pretrained(tmp_path)
    cfg, params = qwen.load(tmp_path)
    prepared = sampling_params(params, cfg)
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(prepared["lm_head"]),
                                      np.asarray(params["embed"]).T)
        assert qwen.lm_head(prepared, cfg) is prepared["lm_head"]
    tokens, mask = prompts(cfg)
    with torch.no_grad():
        expected = model.generate(torch.tensor(tokens.astype(np.int64)),
                                  attention_mask=torch.tensor(mask.astype(np.int64)),
                                  max_new_tokens=MAX_TOKENS, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)[:, 6:].numpy()
    for p in (params, prepared):
        out = run(p, cfg, tokens, mask, temperature=jnp.float32(0.0))
        np.testing.assert_array_equal(np.asarray(out.tokens), expected)


def test_logprobs_match_a_full_forward(tiny):
    _, cfg, params = tiny
    tokens, mask = prompts(cfg, seed=1)
    out = run(params, cfg, tokens, mask, key=3)
    full = np.concatenate([tokens, np.asarray(out.tokens)], axis=1)
    full_mask = np.concatenate([mask, np.ones((3, MAX_TOKENS), bool)], axis=1)
    logits, _ = qwen.forward(params, cfg, full, qwen.positions_from_mask(full_mask))
    logp = jax.nn.log_softmax(logits, axis=-1)
    expected = np.take_along_axis(np.asarray(logp)[:, 5:-1], full[:, 6:, None], axis=2)[..., 0]
    np.testing.assert_allclose(out.logprobs, expected, atol=1e-4)


def test_deterministic_per_key(tiny):
    _, cfg, params = tiny
    tokens, mask = prompts(cfg)
    a, b = run(params, cfg, tokens, mask, key=5), run(params, cfg, tokens, mask, key=5)
    c = run(params, cfg, tokens, mask, key=6)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert not np.array_equal(np.asarray(a.tokens), np.asarray(c.tokens))


def test_a_row_with_its_own_key_samples_the_same_reply_in_any_batch(tiny):
    """Keys per row: a row's reply depends on its prompt and key only, not on its neighbours or
    its place in the batch."""
    _, cfg, params = tiny
    tokens, mask = prompts(cfg)
    keys = jax.random.split(jax.random.key(3), 3)
    alone = run(params, cfg, tokens, mask, key=keys)
    others, other_mask = prompts(cfg, seed=8)
    moved = run(params, cfg, np.stack([others[0], tokens[1], tokens[0]]),
                np.stack([other_mask[0], mask[1], mask[0]]),
                key=jnp.stack([jax.random.key(11), keys[1], keys[0]]))
    np.testing.assert_array_equal(np.asarray(moved.tokens)[1], np.asarray(alone.tokens)[1])
    np.testing.assert_array_equal(np.asarray(moved.tokens)[2], np.asarray(alone.tokens)[0])
    assert not np.array_equal(np.asarray(moved.tokens)[0], np.asarray(alone.tokens)[2])
    with pytest.raises(ValueError, match=r"key: \(2,\) keys for 3 rows"):
        run(params, cfg, tokens, mask, key=keys[:2])


def test_stop_tokens_and_budget_end_rows_cleanly(tiny):
    _, cfg, params = tiny
    tokens, mask = prompts(cfg)
    greedy = np.asarray(run(params, cfg, tokens, mask, temperature=jnp.float32(0.0)).tokens)
    stop = int(greedy[0, 2])  # row 0 stops at its third token
    out = run(params, cfg, tokens, mask, temperature=jnp.float32(0.0), stop=(stop,))
    for row in range(3):
        hits = np.flatnonzero(greedy[row] == stop)
        n = hits[0] + 1 if hits.size else MAX_TOKENS
        assert int(out.lengths[row]) == n
        np.testing.assert_array_equal(np.asarray(out.tokens)[row, :n], greedy[row, :n])
        assert np.all(np.asarray(out.tokens)[row, n:] == 0)
        assert np.all(np.asarray(out.logprobs)[row, n:] == 0)
    short = run(params, cfg, tokens, mask, temperature=jnp.float32(0.0), budget=3)
    assert np.asarray(short.lengths).tolist() == [3, 3, 3]
    np.testing.assert_array_equal(np.asarray(short.tokens)[:, :3], greedy[:, :3])
    assert compiled_generate._cache_size() >= 1
    sizes = compiled_generate._cache_size()
    run(params, cfg, tokens, mask, temperature=jnp.float32(0.0), budget=5)
    assert compiled_generate._cache_size() == sizes  # a new budget does not recompile


def test_too_small_a_cache_is_an_error(tiny):
    _, cfg, params = tiny
    tokens, mask = prompts(cfg)
    with pytest.raises(ValueError, match="cannot hold 6 prompt tokens and max_tokens=8"):
        generate(params, cfg, tokens, qwen.positions_from_mask(mask), qwen.init_cache(cfg, 3, 10),
                 jax.random.key(0), max_tokens=MAX_TOKENS, max_new_tokens=jnp.int32(8),
                 stop_tokens=jnp.array([-1], jnp.int32))


def test_top_k_one_and_tiny_top_p_are_greedy(tiny):
    _, cfg, params = tiny
    tokens, mask = prompts(cfg)
    greedy = run(params, cfg, tokens, mask, temperature=jnp.float32(0.0)).tokens
    top1 = run(params, cfg, tokens, mask, key=9, top_k=jnp.int32(1)).tokens
    nucleus = run(params, cfg, tokens, mask, key=9, top_p=jnp.float32(1e-6)).tokens
    np.testing.assert_array_equal(top1, greedy)
    np.testing.assert_array_equal(nucleus, greedy)


def test_continuing_reuses_the_cache(tiny):
    _, cfg, params = tiny
    tokens, mask = prompts(cfg, seed=2)
    first = run(params, cfg, tokens, mask, key=1, budget=4, temperature=jnp.float32(0.0))
    observation = np.random.default_rng(4).integers(1, cfg.vocab_size, (3, 3)).astype(np.int32)
    obs_pos = (np.asarray(first.next_positions)[:, None] + np.arange(3)).astype(np.int32)
    second = generate(params, cfg, observation, obs_pos, first.cache, jax.random.key(2),
                      max_tokens=MAX_TOKENS, max_new_tokens=jnp.int32(4),
                      stop_tokens=jnp.array([-1], jnp.int32),
                      **{**KNOBS, "temperature": jnp.float32(0.0)})
    # the same conversation rendered in one piece, greedy from scratch
    whole = np.concatenate([tokens, np.asarray(first.tokens)[:, :4], observation], axis=1)
    whole_mask = np.concatenate([mask, np.ones((3, 7), bool)], axis=1)
    fresh = run(params, cfg, whole, whole_mask, temperature=jnp.float32(0.0), budget=4)
    np.testing.assert_array_equal(np.asarray(second.tokens)[:, :4],
                                  np.asarray(fresh.tokens)[:, :4])
    np.testing.assert_allclose(np.asarray(second.logprobs)[:, :4],
                               np.asarray(fresh.logprobs)[:, :4], atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.3, 1.0]))
def test_first_max_is_argmax(seed, nan_share):
    """Ties (few distinct values, -inf among them) go to the first index, a NaN wins, as in
    `jnp.argmax`."""
    rng = np.random.default_rng(seed)
    logits = rng.integers(-3, 3, (4, 50)).astype(np.float32)
    logits[logits == -3] = -np.inf
    logits[3] = -np.inf if seed % 2 else logits[3]  # a row without a finite entry
    logits[rng.random((4, 50)) < nan_share * rng.random((4, 1))] = np.nan
    logits = jnp.asarray(logits)
    top = jnp.max(logits, axis=-1, keepdims=True)
    np.testing.assert_array_equal(np.asarray(first_max(logits, top)),
                                  np.asarray(jnp.argmax(logits, axis=-1)))


def test_sampled_tokens_follow_the_truncated_softmax():
    """20,000 draws per row against the exact probabilities: softmax(logits / T) renormalised
    over the top-k / top-p set; tokens outside the set are never drawn (chi-square bound)."""
    from models.qwen.sampler import sample_token

    logits = jnp.asarray(np.random.default_rng(0).normal(0, 2, (3, 12)), jnp.float32)
    draws = 20_000
    many = jnp.repeat(logits, draws, axis=0)
    cases = [(0.7, 0, 1.0), (1.3, 4, 1.0), (1.0, 0, 0.6)]
    sample = jax.jit(sample_token)
    for temperature, top_k, top_p in cases:
        keys = jax.random.split(jax.random.key(1), len(many))
        tokens, logprobs = sample(many, keys, jnp.float32(temperature),
                                  jnp.int32(top_k), jnp.float32(top_p))
        probs = np.asarray(jax.nn.softmax(logits / temperature), np.float64)
        np.testing.assert_allclose(np.asarray(logprobs), np.log(np.repeat(probs, draws, 0))[
            np.arange(len(tokens)), np.asarray(tokens)], atol=1e-5)
        counts = np.asarray(tokens).reshape(3, draws)
        for row in range(3):
            order = np.argsort(-probs[row])
            kept = order[:top_k] if top_k else order
            before = np.cumsum(probs[row][kept]) - probs[row][kept]
            kept = kept[before < top_p]
            want = np.zeros(12)
            want[kept] = probs[row][kept] / probs[row][kept].sum()
            seen = np.bincount(counts[row], minlength=12)
            assert seen[want == 0].sum() == 0
            expected = want[kept] * draws
            chi2 = np.sum((seen[kept] - expected) ** 2 / expected)
            assert chi2 < len(kept) + 6 * np.sqrt(2 * len(kept)), (temperature, top_k, top_p)


def test_chunked_decode_with_penalties_and_top_logprobs_matches_a_reference(tiny):
    """Decoding in two chunks (``write_last=False``, the next call prefilling the last token)
    with presence and frequency penalties and top log-probs, against a numpy reference over one
    full forward: each step's penalised logits from the tokens sampled before it, the greedy
    token their argmax, and the log-probs (sampled and top 3) of softmax(penalised / T)."""
    from models.qwen.sampler import Penalties

    _, cfg, params = tiny
    if not cfg.layer_types:
        pytest.skip("the hybrid model covers both kinds of layer (one compilation, not two)")
    tokens, mask = prompts(cfg, seed=3)
    presence, frequency = np.float32([0.0, 1.5, -0.5]), np.float32([2.0, 0.0, 0.7])

    def chunked(temperature, key):
        penalties = Penalties(jnp.zeros((3, cfg.vocab_size), jnp.int32), jnp.asarray(presence),
                              jnp.asarray(frequency))
        cache = qwen.init_cache(cfg, 3, tokens.shape[1] + 2 * MAX_TOKENS + 8)
        common = dict(max_tokens=MAX_TOKENS, stop_tokens=jnp.array([-1], jnp.int32),
                      top_logprobs=3, write_last=False,
                      **{**KNOBS, "temperature": jnp.float32(temperature)})
        first = generate(params, cfg, tokens, qwen.positions_from_mask(mask), cache,
                         jax.random.key(key), max_new_tokens=jnp.int32(3), penalties=penalties,
                         **common)
        # the last token, left-padded to the prompt's shape: the same compiled program
        last = np.zeros_like(tokens)
        last[:, -1] = np.asarray(first.tokens)[:, 2]
        last_positions = np.full(tokens.shape, -1, np.int32)
        last_positions[:, -1] = np.asarray(first.next_positions) - 1
        second = generate(params, cfg, last, last_positions,
                          first.cache, jax.random.key(key + 1), max_new_tokens=jnp.int32(5),
                          penalties=penalties._replace(counts=first.counts), **common)
        return [np.concatenate([np.asarray(a)[:, :3], np.asarray(b)[:, :5]], axis=1)
                for a, b in zip((first.tokens, first.logprobs, first.top_tokens,
                                 first.top_logprobs),
                                (second.tokens, second.logprobs, second.top_tokens,
                                 second.top_logprobs))] + [np.asarray(second.counts)]

    plain = np.asarray(run(params, cfg, tokens, mask, temperature=jnp.float32(0.0)).tokens)
    for temperature in (0.0, 0.7):
        out, logprobs, top_ids, top_lps, counts = chunked(temperature, key=4)
        full = np.concatenate([tokens, out], axis=1)
        full_mask = np.concatenate([mask, np.ones((3, MAX_TOKENS), bool)], axis=1)
        logits, _ = qwen.forward(params, cfg, full, qwen.positions_from_mask(full_mask))
        logits = np.asarray(logits, np.float64)[:, 5:-1]  # [3, 8, V]: step t's logits
        seen = np.zeros((3, cfg.vocab_size))
        for t in range(MAX_TOKENS):
            step = logits[:, t] - frequency[:, None] * seen - presence[:, None] * (seen > 0)
            if temperature == 0:
                np.testing.assert_array_equal(out[:, t], np.argmax(step, axis=-1))
            scaled = step / (temperature or 1.0)
            logp = scaled - np.log(np.sum(np.exp(scaled - scaled.max(-1, keepdims=True)),
                                          -1, keepdims=True)) - scaled.max(-1, keepdims=True)
            np.testing.assert_allclose(logprobs[:, t], logp[np.arange(3), out[:, t]],
                                       atol=2e-4)
            np.testing.assert_array_equal(top_ids[:, t], np.argsort(-logp, axis=-1)[:, :3])
            np.testing.assert_allclose(top_lps[:, t], -np.sort(-logp, axis=-1)[:, :3],
                                       atol=2e-4)
            seen[np.arange(3), out[:, t]] += 1
        np.testing.assert_array_equal(counts, seen)
        if temperature == 0:  # the penalties changed the greedy replies of the penalised rows
            assert not np.array_equal(out[2], plain[2]) or not np.array_equal(out[0], plain[0])


def test_a_reply_decoded_in_chunks_draws_what_one_call_draws(tiny):
    """Chunks of 3 tokens, each told the tokens every row has (`key_offsets`) and given the
    row's budget left, sample the tokens and log-probs of one call with the same row keys.
    Without write_last a row's last token stays out of the cache, also when the row ended
    before its chunk did."""
    _, cfg, params = tiny
    if not cfg.layer_types:
        pytest.skip("the hybrid model covers both kinds of layer (one compilation, not two)")
    tokens, mask = prompts(cfg, seed=5)
    keys = jax.random.split(jax.random.key(9), 3)
    stop = int(np.asarray(run(params, cfg, tokens, mask, key=keys).tokens)[0, 4])
    whole = run(params, cfg, tokens, mask, key=keys, stop=(stop,))
    lengths = np.asarray(whole.lengths)
    assert lengths[0] <= 5 and lengths.max() == MAX_TOKENS  # row 0 ends early, another not
    cache = qwen.init_cache(cfg, 3, tokens.shape[1] + 2 * MAX_TOKENS + 8)
    prompt, positions = tokens, np.asarray(qwen.positions_from_mask(mask))
    got, logprobs = [[] for _ in range(3)], [[] for _ in range(3)]
    while True:
        offsets = np.array([len(g) for g in got], np.int32)
        out = generate(params, cfg, prompt, positions, cache, keys, max_tokens=3,
                       max_new_tokens=np.maximum(MAX_TOKENS - offsets, 1),
                       stop_tokens=jnp.array([stop], jnp.int32), write_last=False,
                       key_offsets=offsets, **KNOBS)
        cache = out.cache
        ids, lps, counts, following = (np.asarray(x) for x in (
            out.tokens, out.logprobs, out.lengths, out.next_positions))
        prompt, positions = np.zeros((3, 1), np.int32), np.full((3, 1), -1, np.int32)
        for row in range(3):
            got[row] += ids[row, :counts[row]].tolist()
            logprobs[row] += lps[row, :counts[row]].tolist()
            if counts[row] and got[row][-1] != stop and len(got[row]) < MAX_TOKENS:
                prompt[row, 0], positions[row, 0] = got[row][-1], following[row] - 1
        if (positions < 0).all():
            break
    for row in range(3):
        assert got[row] == np.asarray(whole.tokens)[row, :lengths[row]].tolist()
        np.testing.assert_allclose(logprobs[row], np.asarray(whole.logprobs)[row, :lengths[row]],
                                   atol=1e-5)
    np.testing.assert_array_equal(np.asarray(cache.valid).sum(axis=1),
                                  mask.sum(axis=1) + lengths - 1)
