"""From per-trajectory and per-turn credit to tokens, and SPO's high-probability mask.

Every credit method computes on `[B]` or `[B, T]` arrays; one gather through `turn_ids` moves the
result to the `[B, L]` token grid, masked by `loss_mask` (SPEC §0).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prover_jax.checks import check_arrays, kernel


def per_turn(values: jax.Array, turn_valid: jax.Array, name: str = "values") -> jax.Array:
    """Broadcasts `[B]` values to `[B, T]` (or passes `[B, T]` through), zero on padding turns.

    Args:
      values: float [B] or [B, T].
      turn_valid: bool [B, T].
      name: what errors call `values` (the caller's argument name).

    Returns:
      float32 [B, T].
    """
    spec = "b" if jnp.ndim(values) == 1 else "b t"
    check_arrays({name: (values, spec, "f"), "turn_valid": (turn_valid, "b t", "b")})
    grid = values[:, None] if jnp.ndim(values) == 1 else values
    return jnp.where(turn_valid, grid, 0.0).astype(jnp.float32)


def materialise(values: jax.Array) -> jax.Array:
    """The same `[B, T]` values, computed into a buffer of their own before the token gather.

    Fused into the gather, the producer of per-turn values (group statistics, segment
    arithmetic) would be recomputed for every token, 10-20x slower at 16k tokens. An identity
    scatter is a fusion boundary on every backend; `optimization_barrier` is not, since XLA:CPU
    removes barriers before fusing.
    """
    rows = jnp.arange(values.shape[0])[:, None]
    cols = jnp.arange(values.shape[1])[None, :]
    return jnp.zeros_like(values).at[rows, cols].set(values, unique_indices=True)


@kernel
def to_tokens(values: jax.Array, turn_ids: jax.Array, loss_mask: jax.Array) -> jax.Array:
    """Per-trajectory `[B]` or per-turn `[B, T]` values on the token grid.

    Token `u` of row `b` gets `values[b]` or `values[b, turn_ids[b, u]]` where `loss_mask` is
    true, and 0 everywhere else.

    Args:
      values: float [B] or [B, T].
      turn_ids: int32 [B, L]; turn of each policy token, -1 elsewhere.
      loss_mask: bool [B, L]; true exactly on policy-generated tokens.

    Returns:
      float32 [B, L].
    """
    spec = "b" if jnp.ndim(values) == 1 else "b t"
    check_arrays({"values": (values, spec, "f"), "turn_ids": (turn_ids, "b l", "i"),
                  "loss_mask": (loss_mask, "b l", "b")})
    if jnp.ndim(values) == 1:
        grid = jnp.broadcast_to(values[:, None], turn_ids.shape)
    else:
        values = materialise(values)
        safe = jnp.clip(turn_ids, 0, values.shape[1] - 1)
        grid = jnp.take_along_axis(values, safe, axis=1)
    return jnp.where(loss_mask, grid, 0.0).astype(jnp.float32)


@kernel
def high_prob_mask(logprobs: jax.Array, loss_mask: jax.Array,
                   threshold: float | jax.Array = 0.9) -> jax.Array:
    """Policy tokens whose sampling probability under the generating policy is >= `threshold`.

    SPO-chain and SPO-tree drop these tokens from the loss: train with
    `loss_mask & ~high_prob_mask(logprobs, loss_mask)`.

    Args:
      logprobs: float [B, L]; log-probability of each sampled token when it was generated.
      loss_mask: bool [B, L].
      threshold: probability threshold (0.9 in SPO).

    Returns:
      bool [B, L]; false on every non-policy token.
    """
    check_arrays({"logprobs": (logprobs, "b l", "f"), "loss_mask": (loss_mask, "b l", "b")})
    return loss_mask & (logprobs >= jnp.log(threshold))
