"""Gated DeltaNet, the linear-attention mixer of Qwen3.5.

Per value head, a state `S [dk, dv]` evolves with every token t:

    S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t

with q, k l2-normalised (q also scaled by dk^-1/2), beta = sigmoid(b) and the log-decay
g = -exp(A_log) * softplus(a + dt_bias). q, k and v first pass a causal depthwise conv (kernel K)
and SiLU; the output is RMS-normalised per head, gated by silu(z) and projected back.

Two forms of the recurrence, equal up to rounding: `recurrent` (a scan over tokens, for
decoding) and `chunked` (64-token chunks: a triangular solve inside each chunk and a scan over
chunks, for prefill and training).

Padding is exact anywhere in a sequence, not only on the left: a padding token's q, k, v are 0
and its beta and g are 0, so it leaves the state unchanged, and the conv runs over the valid
tokens only (compacted), continuing from the previous call's last K-1 inputs. So a cached
conversation can be extended with a left-padded chunk, or a finished row can idle, without
changing anything the real tokens see.

Glossary: b batch, l tokens, c conv channels, h value heads, k key dim, v value dim.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from models.qwen.config import QwenConfig
from models.qwen.matmul import dense
from models.qwen.sharding import set_in_rows

CHUNK = 64
HIGHEST = jax.lax.Precision.HIGHEST


def l2_normalise(x: jax.Array) -> jax.Array:
    """x / sqrt(sum x^2 + 1e-6) over the last axis."""
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def causal_conv(x: jax.Array, valid: jax.Array, weight: jax.Array, history: jax.Array
                ) -> tuple[jax.Array, jax.Array]:
    """Depthwise causal conv + SiLU over the valid tokens of each row.

    Args:
      x: [B, L, C] inputs.
      valid: bool [B, L].
      weight: [K, C]; weight[K-1] multiplies the current token.
      history: [B, K-1, C] the last K-1 valid inputs before this chunk, oldest first.

    Returns:
      (outputs [B, L, C], 0 on padding; the new history [B, K-1, C]).
    """
    b, l, c = x.shape
    kernel = weight.shape[0]
    rank = jnp.cumsum(valid, axis=1) - 1  # index of each valid token among the row's valid ones
    slot = jnp.where(valid, kernel - 1 + rank, kernel - 1 + l)  # invalid -> dropped
    stream = jnp.concatenate([history, jnp.zeros((b, l, c), x.dtype)], axis=1)
    stream = set_in_rows(stream, slot, x)
    window = sum(stream[:, j:j + l, :].astype(jnp.float32) * weight[j].astype(jnp.float32)
                 for j in range(kernel))
    compact = jax.nn.silu(window).astype(x.dtype)
    out = jnp.take_along_axis(compact, jnp.maximum(rank, 0)[..., None], axis=1)
    n_valid = jnp.sum(valid, axis=1)
    keep = n_valid[:, None] + jnp.arange(kernel - 1)[None, :]
    new_history = jnp.take_along_axis(stream, keep[..., None], axis=1)
    return jnp.where(valid[..., None], out, 0.0), new_history


def recurrent(q, k, v, beta, g, state):
    """The delta rule token by token.

    Args:
      q, k: float32 [B, L, H, K]; v: [B, L, H, V]; beta, g: [B, L, H]; state: [B, H, K, V].

    Returns:
      (outputs [B, L, H, V], final state).
    """
    def step(s, inputs):
        qt, kt, vt, bt, gt = inputs
        s = s * jnp.exp(gt)[..., None, None]
        delta = (vt - jnp.einsum("bhkv,bhk->bhv", s, kt, precision=HIGHEST)) * bt[..., None]
        s = s + kt[..., :, None] * delta[..., None, :]
        return s, jnp.einsum("bhkv,bhk->bhv", s, qt, precision=HIGHEST)

    time_major = [jnp.moveaxis(x, 1, 0) for x in (q, k, v, beta, g)]
    state, out = jax.lax.scan(step, state, time_major)
    return jnp.moveaxis(out, 0, 1), state


def chunked(q, k, v, beta, g, state):
    """The delta rule in chunks of 64 tokens; same arguments and results as `recurrent`."""
    b, l, h, _ = q.shape
    dv = v.shape[-1]
    n = -(-l // CHUNK)
    pad = n * CHUNK - l

    def blocks(x):  # [B, L, H, ...] -> [N, B, H, C, ...]
        x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        x = x.reshape(b, n, CHUNK, h, *x.shape[3:])
        return jnp.moveaxis(jnp.moveaxis(x, 3, 2), 1, 0)

    # The solve's batch as the rows, then heads x chunks in one axis. The TPU compiler tiles
    # a batch axis of the solve to 128 lanes; given [N, B, H] it may pick the rows, and
    # with one row per chip pads them 128-fold (bench/RESULTS.md). Heads stay major in
    # the folded axis, so a sharding over heads stays a sharding of it.
    def rows_major(x):  # [N, B, H, C, X] -> [B, H * N, C, X]
        return jnp.moveaxis(x, 0, 2).reshape(b, h * n, CHUNK, x.shape[-1])

    q, k, v, beta, g = (blocks(x) for x in (q, k, v, beta, g))
    cum = jnp.cumsum(g, axis=-1)  # [N, B, H, C]
    lower = jnp.tril(jnp.ones((CHUNK, CHUNK), bool))
    decay = jnp.where(lower, jnp.exp(jnp.where(lower, cum[..., :, None] - cum[..., None, :],
                                                     0.0)), 0.0)
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    mix = jnp.einsum("...ik,...jk->...ij", k_beta, k, precision=HIGHEST) * decay
    unit_lower = rows_major(jnp.eye(CHUNK) + jnp.tril(mix, -1))

    def solve(rhs):  # [N, B, H, C, X] -> [N, B, H, C, X]
        out = jax.scipy.linalg.solve_triangular(unit_lower, rows_major(rhs), lower=True,
                                                unit_diagonal=True)
        return jnp.moveaxis(out.reshape(b, h, n, CHUNK, -1), 2, 0)

    u = solve(v_beta)
    w = solve(k_beta * jnp.exp(cum)[..., None])
    intra = jnp.einsum("...ik,...jk->...ij", q, k, precision=HIGHEST) * decay
    q_decayed = q * jnp.exp(cum)[..., None]
    k_decayed = k * jnp.exp(cum[..., -1:] - cum)[..., None]
    chunk_decay = jnp.exp(cum[..., -1])

    def step(s, chunk):
        u_n, w_n, q_n, k_n, intra_n, decay_n = chunk
        v_new = u_n - jnp.einsum("bhck,bhkv->bhcv", w_n, s, precision=HIGHEST)
        out = (jnp.einsum("bhck,bhkv->bhcv", q_n, s, precision=HIGHEST)
               + jnp.einsum("bhcd,bhdv->bhcv", intra_n, v_new, precision=HIGHEST))
        s = s * decay_n[..., None, None] + jnp.einsum("bhck,bhcv->bhkv", k_n, v_new,
                                                      precision=HIGHEST)
        return s, out

    state, out = jax.lax.scan(step, state, (u, w, q_decayed, k_decayed, intra, chunk_decay))
    out = jnp.moveaxis(out, 0, 1)  # [B, N, H, C, V]
    out = jnp.moveaxis(out, 2, 3).reshape(b, n * CHUNK, h, dv)
    return out[:, :l], state


def gated_deltanet(cfg: QwenConfig, x: jax.Array, w, valid: jax.Array, history: jax.Array,
                   state: jax.Array, use_chunks: bool | None = None):
    """One Gated DeltaNet mixer.

    Args:
      cfg: the model config.
      x: [B, L, D] normalised layer input.
      w: this layer's `linear` params.
      valid: bool [B, L] real tokens.
      history: [B, K-1, C] conv inputs carried from earlier tokens.
      state: float32 [B, H, K, V] recurrent state.
      use_chunks: None picks the chunked form for L >= 64, the recurrent one below.

    Returns:
      (output [B, L, D], new history, new state).
    """
    hk, dk = cfg.linear_num_key_heads, cfg.linear_key_head_dim
    hv, dv = cfg.linear_num_value_heads, cfg.linear_value_head_dim
    b, l, _ = x.shape
    x = jnp.where(valid[..., None], x, 0.0)
    mixed, history = causal_conv(dense(x, w["qkv"]), valid, w["conv"], history)
    q = mixed[..., :hk * dk].reshape(b, l, hk, dk).astype(jnp.float32)
    k = mixed[..., hk * dk:2 * hk * dk].reshape(b, l, hk, dk).astype(jnp.float32)
    v = mixed[..., 2 * hk * dk:].reshape(b, l, hv, dv).astype(jnp.float32)
    z = dense(x, w["z"])
    beta = jnp.where(valid[..., None], jax.nn.sigmoid(dense(x, w["b"]).astype(jnp.float32)), 0.0)
    a = dense(x, w["a"]).astype(jnp.float32)
    g = -jnp.exp(w["A_log"].astype(jnp.float32)) * jax.nn.softplus(a + w["dt_bias"])
    g = jnp.where(valid[..., None], g, 0.0)
    repeat = hv // hk
    q = jnp.repeat(l2_normalise(q), repeat, axis=2) * dk ** -0.5
    k = jnp.repeat(l2_normalise(k), repeat, axis=2)
    chunks = l >= CHUNK if use_chunks is None else use_chunks
    out, state = (chunked if chunks else recurrent)(q, k, v, beta, g, state)
    normed = out * jax.lax.rsqrt(jnp.mean(out * out, axis=-1, keepdims=True) + cfg.rms_norm_eps)
    gated = (w["norm"] * normed.astype(x.dtype)) * jax.nn.silu(z.astype(jnp.float32))
    return dense(gated.astype(x.dtype), w["out"], axes=2), history, state
