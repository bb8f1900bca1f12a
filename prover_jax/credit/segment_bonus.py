"""ProVer credit, ProVer eq. 4 (SPEC §2).

The host side (eligibility, the judge's proposal, boundary continuations) reduces each row to
three numbers: the verified segment's inclusive turn bounds and its measured advantage
`Δ = V_post - V_pre`. This kernel only adds the positive part of Δ to the segment's turns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prover_jax.checks import check_arrays, kernel
from prover_jax.credit.tokens import per_turn


@kernel
def prover(base: jax.Array, turn_valid: jax.Array, seg_start: jax.Array, seg_end: jax.Array,
           delta: jax.Array, lam: float | jax.Array = 1.0) -> jax.Array:
    """`A[b, t] = A_base[b, t] + lam * max(delta[b], 0) * [seg_start[b] <= t <= seg_end[b]]`.

    Rows without a valid measurement carry `delta = 0` (their segment bounds are then ignored),
    so every row other than a group's selected success keeps its base advantage.

    Args:
      base: float32 [B] (GRPO) or [B, T] (any per-turn advantage) base advantages.
      turn_valid: bool [B, T].
      seg_start: int32 [B] first turn of the verified segment (any value where delta = 0).
      seg_end: int32 [B] last turn, inclusive.
      delta: float32 [B] measured segment advantage, 0 where there is none.
      lam: weight of the segment bonus (lambda = 1 in the paper).

    Returns:
      float32 [B, T]; 0 on padding turns.
    """
    check_arrays({
        "turn_valid": (turn_valid, "b t", "b"), "seg_start": (seg_start, "b", "i"),
        "seg_end": (seg_end, "b", "i"), "delta": (delta, "b", "f"),
    })
    turns = jnp.arange(turn_valid.shape[1])[None, :]
    inside = (turns >= seg_start[:, None]) & (turns <= seg_end[:, None])
    bonus = jnp.where(inside, lam * jnp.maximum(delta, 0.0)[:, None], 0.0)
    return jnp.where(turn_valid, per_turn(base, turn_valid, "base") + bonus, 0.0)
