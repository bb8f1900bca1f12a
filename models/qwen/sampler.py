"""Batched generation with a KV cache, the decode loop inside `lax.while_loop`.

`generate` prefills the prompt (or only the new tokens of a continuing conversation: pass the
cache and positions of the previous call) and decodes until every row produced a stop token or
`max_new_tokens` tokens. Knobs that change between calls (temperature, top-p, top-k, the token
budget) are arrays, so changing them never recompiles; only the output buffer size and the cache
size are static.

Sampling: temperature 0 is greedy; otherwise logits / temperature, then top-k (0 = off) and
top-p (1 = off) truncation, then a categorical draw. The returned log-probabilities are those of
the sampled tokens under softmax(logits / temperature) without truncation (temperature 0: plain
softmax), the behaviour policy an RL learner needs for importance ratios. Finished rows keep
running but write padding: their slots are marked invalid and their logprobs are 0. A row with
no new token (positions all -1) is idle: it samples nothing and its cache row is left as it was,
so a caller can keep one cache for a fixed set of rows and continue only some of them.

Opt-in extras for a serving loop, each off by default, and off they compile exactly the program
without them (the rollout's):

- ``penalties=Penalties(counts, presence, frequency)``: OpenAI's presence and frequency
  penalties, ``logits[v] -= frequency * count[v] + presence * (count[v] > 0)`` over the tokens
  sampled so far, applied before temperature inside the loop; the counts come back in
  ``Sampled.counts`` for the next call. The returned log-probs are then those of the penalised
  distribution, the one sampled from.
- ``top_logprobs=K`` (static): the K most likely tokens of every step and their log-probs under
  the same distribution as the sampled token's (``Sampled.top_tokens`` / ``top_logprobs``).
- ``write_last=False`` (static): the last sampled token is not written to the cache, so the next
  call can prefill it (it is that call's one-token prompt) and decode on: decoding in chunks
  this way samples what one long call would, chunk after chunk.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from models.qwen.config import QwenConfig
from models.qwen.model import Cache, check_token_ids, forward, unstack_layers
from models.qwen.platform import platform_of

# XLA:CPU's YNNPACK fusions run the decode step's [B, D] x [D, N] matmuls at about two thirds of
# the speed of its default dot (16 MLPs at batch 8: 9.5 vs 6.5 ms; a 55M Qwen3 decode step: 15.5
# vs 13.2 ms); for prompt-sized matmuls the two are within 5%. The option is a CPU compiler flag,
# meant to leave other backends untouched (only CPU is tested here).
DECODE_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def sampling_params(params, cfg: QwenConfig):
    """The params laid out as `generate` runs fastest on their devices' platform (a pytree of
    the same arrays or of copies; `platform.platform_of`). `generate` accepts either layout;
    preparing the params once per weight update saves the copies in every call.

    On CPU: every layer's weights as separate arrays (`unstack_layers`) and, when the model ties
    its embeddings, the LM head as its own [D, V] array (a transposed copy of the embedding):
    XLA:CPU runs a decode step's [B, D] x [D, V] matmul against the [V, D] embedding ~5x slower
    than against a [D, V] array (a 55M tied Qwen3 at batch 8: 33 ms per step vs 14 ms). Other
    platforms: the params as they are.

    For sampling only: the copies do not follow later changes to the params, gradients would
    reach the head's copy instead of the embedding, and `save` refuses the layout.
    """
    if platform_of(params) != "cpu":
        return params
    if not isinstance(params["layers"], tuple):
        params = unstack_layers(params)
    if cfg.tie_word_embeddings and "lm_head" not in params:
        # the barrier keeps XLA from folding the transpose back into the matmul under jit
        params = {**params, "lm_head": jax.lax.optimization_barrier(params["embed"].T)}
    return params


class Penalties(NamedTuple):
    """OpenAI's presence and frequency penalties for `generate` (see the module docstring)."""

    counts: jax.Array  # int32 [B, V] times each token was sampled so far (zeros to start)
    presence: jax.Array  # float32 [B] or scalar
    frequency: jax.Array  # float32 [B] or scalar


class Sampled(NamedTuple):
    """Output of `generate`."""

    tokens: jax.Array  # int32 [B, N] generated tokens, `pad_id` after a row finished
    logprobs: jax.Array  # float32 [B, N], 0 after a row finished
    lengths: jax.Array  # int32 [B] generated tokens per row, stop token included (0: idle)
    cache: Cache  # with prompt and generated tokens written (the last one: see write_last)
    next_positions: jax.Array  # int32 [B] rotary position of each row's next token
    top_tokens: jax.Array | None = None  # int32 [B, N, K] with top_logprobs=K > 0
    top_logprobs: jax.Array | None = None  # float32 [B, N, K], descending
    counts: jax.Array | None = None  # int32 [B, V] with penalties, this call's tokens added


def _truncate(logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Masks logits [B, V] outside the top-k and the top-p nucleus with -inf."""
    ordered = jnp.sort(logits, axis=-1)[:, ::-1]
    vocab = logits.shape[-1]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    kth = jnp.take_along_axis(ordered, jnp.broadcast_to(k - 1, (logits.shape[0], 1)), axis=1)
    probs = jax.nn.softmax(ordered, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each sorted entry
    keep_sorted = before < top_p
    cutoff = jnp.min(jnp.where(keep_sorted, ordered, jnp.inf), axis=-1, keepdims=True)
    threshold = jnp.maximum(kth, cutoff)
    return jnp.where(logits >= threshold, logits, -jnp.inf)


def draw(logits: jax.Array, keys: jax.Array) -> jax.Array:
    """One index per row of float32 logits [B, V] with probability softmax(logits), -inf
    entries never drawn, row b drawn with its own key keys[b] (a key array [B]); int32 [B].

    Inverse-CDF sampling: one uniform per row against the cumulative probabilities, instead of
    `jax.random.categorical`'s Gumbel noise (random bits for every vocabulary entry).
    """
    probs = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    cumulative = jnp.cumsum(probs, axis=-1)
    uniform = jax.vmap(jax.random.uniform)(keys)[:, None]
    target = (1.0 - uniform) * cumulative[:, -1:]
    # the first entry whose cumulative mass reaches the target; it has nonzero probability
    return jnp.sum(cumulative < target, axis=-1).astype(jnp.int32)


def first_max(logits: jax.Array, top: jax.Array) -> jax.Array:
    """`jnp.argmax` of float32 logits [B, V] given their row maxima top [B, 1]: the first index
    holding the maximum (or the first NaN); int32 [B].

    One fused pass over the logits, where `jnp.argmax` is a two-output reduction: a greedy
    `sample_token` on [8, 32000] logits took 1.42 ms per call with `jnp.argmax` on CPU, 0.33 ms
    with this (together with the log-probability computed without materialising logits / T).
    """
    index = jnp.arange(logits.shape[-1], dtype=jnp.int32)
    hit = (logits == top) | jnp.isnan(logits)
    return jnp.min(jnp.where(hit, index, logits.shape[-1]), axis=-1)


def sample_token(logits: jax.Array, keys: jax.Array, temperature: jax.Array,
                 top_k: jax.Array, top_p: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One token per row from float32 logits [B, V], row b drawn with keys[b] (a key array
    [B]); returns (int32 [B], logprob float32 [B])."""
    greedy = temperature <= 0
    temperature = jnp.where(greedy, 1.0, temperature)
    top = jnp.max(logits, axis=-1, keepdims=True)

    def sample(logits, keys):
        scaled = logits / temperature
        truncated = jax.lax.cond((top_k > 0) | (top_p < 1), _truncate, lambda x, *_: x,
                                 scaled, top_k, top_p)
        return draw(truncated, keys)

    token = jax.lax.cond(greedy, lambda x, _: first_max(x, top), sample, logits, keys)
    # log softmax(logits / T) at the token, the division fused into the two reductions
    log_norm = jnp.log(jnp.sum(jnp.exp((logits - top) / temperature), axis=-1))
    chosen = jnp.take_along_axis(logits, token[:, None], axis=1)[:, 0]
    return token, (chosen - top[:, 0]) / temperature - log_norm


def top_log_probs(logits: jax.Array, temperature: jax.Array, k: int
                  ) -> tuple[jax.Array, jax.Array]:
    """The k most likely tokens of float32 logits [B, V] under softmax(logits / temperature)
    (temperature 0: plain softmax, as `sample_token`'s log-probs): (int32 [B, k], float32
    [B, k] log-probs, descending)."""
    temperature = jnp.where(temperature <= 0, 1.0, temperature)
    scaled = logits / temperature
    values, ids = jax.lax.top_k(scaled, k)
    return ids.astype(jnp.int32), values - jax.nn.logsumexp(scaled, axis=-1, keepdims=True)


def penalised(logits: jax.Array, penalties: Penalties | None) -> jax.Array:
    """logits [B, V] less the presence and frequency penalties of the counts so far."""
    if penalties is None:
        return logits
    counts = penalties.counts
    frequency = jnp.reshape(penalties.frequency, (-1, 1))
    presence = jnp.reshape(penalties.presence, (-1, 1))
    return logits - frequency * counts - presence * (counts > 0)


def _counted(penalties: Penalties | None, token: jax.Array, real: jax.Array
             ) -> Penalties | None:
    if penalties is None:
        return None
    counts = jax.vmap(lambda c, t, r: c.at[t].add(r))(
        penalties.counts, token, real.astype(penalties.counts.dtype))
    return penalties._replace(counts=counts)


class _Loop(NamedTuple):
    step: jax.Array  # next output column
    tokens: jax.Array
    logprobs: jax.Array
    lengths: jax.Array
    done: jax.Array  # bool [B]: the row produced a stop token or spent its budget
    last: jax.Array  # int32 [B] latest token
    # bool [B]: the next step writes `last`, a real token not yet in the cache (without
    # write_last, never a done row's: its last token stays out)
    pending: jax.Array
    pos: jax.Array  # int32 [B] rotary position of `last`
    cache: Cache
    top_tokens: jax.Array | None = None  # int32 [B, N, K], with top_logprobs
    top_logprobs: jax.Array | None = None
    penalties: Penalties | None = None


def row_keys(key: jax.Array, rows: int) -> jax.Array:
    """The key array [rows] `generate` samples each row with: `key` itself when it is already
    one key per row, else `rows` keys split from the single key."""
    if key.ndim == 0:
        return jax.random.split(key, rows)
    if key.shape != (rows,):
        raise ValueError(f"key: {key.shape} keys for {rows} rows; give one key or one per row")
    return key


def generate(params, cfg: QwenConfig, prompt: jax.Array, prompt_positions: jax.Array,
             cache: Cache, key: jax.Array, *, max_tokens: int,
             max_new_tokens: jax.Array, stop_tokens: jax.Array,
             temperature: jax.Array = 1.0, top_k: jax.Array = 0, top_p: jax.Array = 1.0,
             pad_id: int | jax.Array = 0, penalties: Penalties | None = None,
             top_logprobs: int = 0, write_last: bool = True,
             key_offsets: jax.Array | None = None) -> Sampled:
    """Samples continuations of a left-padded batch of prompts.

    Checks the prompt's token ids (`check_token_ids`), then runs `compiled_generate`, the
    jitted program (its `lower`, `trace` and cache are there).

    Args:
      params, cfg: the model (params as loaded, or `sampling_params` of them).
      prompt: int32 [B, P] new tokens to prefill (left-padded).
      prompt_positions: int32 [B, P] their rotary positions, -1 on padding.
      cache: a Cache with room for P + max_tokens more slots (donated).
      key: a PRNG key, or a key array [B] with one per row. Row b's tokens are drawn from
        its own key alone (`jax.random.fold_in` of it with the output column), so with keys
        per row a row samples the same reply in any batch.
      max_tokens: N, static size of the output buffers.
      max_new_tokens: int32 scalar in [1, N], the budget of this call (at least one token is
        always sampled), or int32 [B], one per row.
      stop_tokens: int32 [S] ids that end a row (included in its output).
      temperature, top_k, top_p: sampling knobs (arrays; 0 temperature = greedy; top_p in
        (0, 1]).
      pad_id: written after a row finishes.
      penalties: presence and frequency penalties with the counts so far (None: none; the
        rollout's program).
      top_logprobs: K, static: also return each step's K most likely tokens and log-probs.
      write_last: static; False leaves the last sampled token out of the cache, for the next
        call to prefill it and decode on (a token-for-token continuation; see the module
        docstring).
      key_offsets: int32 [B] or None: row b's token in output column c is drawn with
        `fold_in(key_b, key_offsets[b] + c)`, so a reply decoded in chunks, each passing the
        tokens the row already has, draws what one call would (None: offsets 0).

    Returns:
      Sampled.

    Raises:
      ValueError: prompt ids outside the vocabulary, or a cache without room for the prompt
        and `max_tokens`.

    On CPU the layers and the kv cache run unstacked (see `sampling_params`; params not yet
    prepared are prepared in every call, about the cost of one decode step): XLA:CPU would
    otherwise copy each layer's weights and keys and values out of the stacked arrays at every
    step. The cache comes back in the layout it came in: a stacked one is split into per-layer
    arrays and stacked again in every call, which `kv_cache.empty` avoids (it is per-layer on
    CPU).
    """
    check_token_ids(prompt, cfg.vocab_size, "prompt")
    return compiled_generate(params, cfg, prompt, prompt_positions, cache, key,
                             max_tokens=max_tokens, max_new_tokens=max_new_tokens,
                             stop_tokens=stop_tokens, temperature=temperature, top_k=top_k,
                             top_p=top_p, pad_id=pad_id, penalties=penalties,
                             top_logprobs=top_logprobs, write_last=write_last,
                             key_offsets=key_offsets)


# top_logprobs and write_last are static: their defaults compile the rollout's program unchanged
@functools.partial(jax.jit, static_argnames=("cfg", "max_tokens", "top_logprobs", "write_last"),
                   donate_argnames=("cache",), compiler_options=DECODE_COMPILER_OPTIONS)
def compiled_generate(params, cfg: QwenConfig, prompt: jax.Array, prompt_positions: jax.Array,
                      cache: Cache, key: jax.Array, *, max_tokens: int,
                      max_new_tokens: jax.Array, stop_tokens: jax.Array,
                      temperature: jax.Array = 1.0, top_k: jax.Array = 0,
                      top_p: jax.Array = 1.0, pad_id: int | jax.Array = 0,
                      penalties: Penalties | None = None, top_logprobs: int = 0,
                      write_last: bool = True, key_offsets: jax.Array | None = None) -> Sampled:
    """`generate` compiled, without the host-side check of the prompt (see `generate`)."""
    restack = platform_of(cache.valid) == "cpu" and not isinstance(cache.k, tuple)
    params = sampling_params(params, cfg)
    if restack:
        cache = cache._replace(k=tuple(cache.k), v=tuple(cache.v))
    batch, prompt_len = prompt.shape
    slots = cache.valid.shape[1]
    if prompt_len + max_tokens > slots:
        raise ValueError(f"cache: {slots} slots cannot hold {prompt_len} prompt tokens and "
                         f"max_tokens={max_tokens}; a continued cache needs its length on top")
    budget = jnp.minimum(max_new_tokens, max_tokens)
    # the loop's bound; a scalar budget compiles the program without per-row budgets unchanged
    last_column = budget if jnp.ndim(budget) == 0 else jnp.max(budget)
    keys = row_keys(key, batch)

    def column_keys(column: jax.Array) -> jax.Array:
        if key_offsets is None:
            return jax.vmap(jax.random.fold_in, (0, None))(keys, column)
        return jax.vmap(jax.random.fold_in)(keys, key_offsets + column)

    def top(logits: jax.Array) -> tuple[jax.Array | None, jax.Array | None]:
        if not top_logprobs:
            return None, None
        return top_log_probs(logits, temperature, top_logprobs)

    def put(buffer: jax.Array | None, column: jax.Array, values: jax.Array | None,
            real: jax.Array) -> jax.Array | None:
        if buffer is None:
            return None
        return buffer.at[:, column].set(jnp.where(real[:, None], values, 0))

    logits, cache = forward(params, cfg, prompt, prompt_positions, cache, last_only=True)
    logits = penalised(logits[:, -1], penalties)
    token, logprob = sample_token(logits, column_keys(0), temperature, top_k, top_p)
    active = jnp.any(prompt_positions >= 0, axis=1)
    token = jnp.where(active, token, pad_id)
    top_ids, top_values = top(logits)
    if top_logprobs:
        top_ids = put(jnp.zeros((batch, max_tokens, top_logprobs), jnp.int32), 0, top_ids,
                      active)
        top_values = put(jnp.zeros((batch, max_tokens, top_logprobs), jnp.float32), 0,
                         top_values, active)
    done = jnp.isin(token, stop_tokens) | (budget <= 1) | ~active

    def unwritten(real: jax.Array, done: jax.Array) -> jax.Array:
        # without write_last a row's last token, sampled when it is done, stays out of the cache
        return real if write_last else real & ~done

    state = _Loop(
        step=jnp.ones((), jnp.int32),
        tokens=jnp.full((batch, max_tokens), pad_id, jnp.int32).at[:, 0].set(token),
        logprobs=jnp.zeros((batch, max_tokens), jnp.float32).at[:, 0].set(
            jnp.where(active, logprob, 0.0)),
        lengths=active.astype(jnp.int32),
        done=done, last=token, pending=unwritten(active, done),
        pos=jnp.max(prompt_positions, axis=1) + 1, cache=cache,
        top_tokens=top_ids, top_logprobs=top_values,
        penalties=_counted(penalties, token, active))

    def decode(s: _Loop) -> _Loop:
        logits, cache = forward(params, cfg, s.last[:, None],
                                jnp.where(s.pending, s.pos, -1)[:, None], s.cache)
        logits = penalised(logits[:, 0], s.penalties)
        token, logprob = sample_token(logits, column_keys(s.step), temperature, top_k, top_p)
        real = ~s.done
        token = jnp.where(real, token, pad_id)
        done = s.done | (real & jnp.isin(token, stop_tokens)) | (s.step + 1 >= budget)
        top_ids, top_values = top(logits)
        return _Loop(s.step + 1, s.tokens.at[:, s.step].set(token),
                     s.logprobs.at[:, s.step].set(jnp.where(real, logprob, 0.0)),
                     s.lengths + real, done, token, unwritten(real, done), s.pos + real, cache,
                     put(s.top_tokens, s.step, top_ids, real),
                     put(s.top_logprobs, s.step, top_values, real),
                     _counted(s.penalties, token, real))

    if max_tokens > 1:  # with one token the loop never runs: it need not be compiled
        state = jax.lax.while_loop(lambda s: (s.step < last_column) & ~jnp.all(s.done),
                                   decode, state)
    s = state
    cache = s.cache
    if write_last:
        _, cache = forward(params, cfg, s.last[:, None],
                           jnp.where(s.pending, s.pos, -1)[:, None], cache,
                           hidden_only=True)  # writes the last token; no logits needed
    if restack:
        cache = cache._replace(k=jnp.stack(cache.k), v=jnp.stack(cache.v))
    return Sampled(s.tokens, s.logprobs, s.lengths, cache, s.pos + 1, s.top_tokens,
                   s.top_logprobs, None if penalties is None else s.penalties.counts)
