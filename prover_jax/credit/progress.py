"""Dense oracle credit: the task's true progress as a per-turn advantage (a positive control).

The host side reads the environment's progress oracle (`envs.Env.oracle_progress`, hidden
state) before and after every action; the kernel adds the change to the outcome advantage of
that action's turn. On a testbed where the oracle exists (household-pivot) this is the most a
credit method could say about each action, so a comparison that cannot separate it from GRPO
cannot separate any method.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prover_jax.checks import check_arrays, kernel
from prover_jax.credit.tokens import per_turn


@kernel
def progress_credit(base: jax.Array, turn_valid: jax.Array, progress_gain: jax.Array,
                    weight: float | jax.Array = 1.0) -> jax.Array:
    """`A[b, t] = A_base[b, t] + weight * progress_gain[b, t]` on valid turns.

    Args:
      base: float32 [B] (GRPO) or [B, T] base advantages.
      turn_valid: bool [B, T].
      progress_gain: float32 [B, T], the oracle's progress after turn t minus before it.
      weight: the gain's weight.

    Returns:
      float32 [B, T]; 0 on padding turns.
    """
    check_arrays({"turn_valid": (turn_valid, "b t", "b"),
                  "progress_gain": (progress_gain, "b t", "f")})
    shaped = per_turn(base, turn_valid, "base") + weight * progress_gain
    return jnp.where(turn_valid, shaped, 0.0)
