"""Trajectory-level outcome advantages (SPEC §1): GRPO and RLOO.

Both take the terminal rewards `[B]` and group ids `[B]` of a padded batch and return one
advantage per row. Rows whose group id is negative are padding and get exactly 0; so does every
row of a group whose rewards are all equal (the mean is subtracted exactly, not up to rounding).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prover_jax.checks import check_arrays, kernel
from prover_jax.config import check_choice
from prover_jax.credit.registry import Scale
from prover_jax.credit.segments import dense_ids, segment_stats


def group_stats(rewards: jax.Array, group_ids: jax.Array):
    """Segment statistics of the rewards of each row's group (padding rows ignored)."""
    valid = group_ids >= 0
    ids = dense_ids((group_ids,), valid)
    return valid, segment_stats(rewards.astype(jnp.float32), ids)


@kernel(static_argnames=("scale",))
def grpo(rewards: jax.Array, group_ids: jax.Array, scale: Scale = "none",
         eps: float | jax.Array = 1e-6) -> jax.Array:
    """GRPO advantage, ProVer eq. 1: `A_i = R_i - mean_{j in g(i)} R_j`.

    With `scale="std"` the centred reward is divided by the group's unbiased std plus `eps`, as
    verl and TRL compute it.

    Args:
      rewards: float32 [B] terminal rewards.
      group_ids: int32 [B] group of each row; -1 marks a padding row.
      scale: "none" (the paper's mean-centred form) or "std".
      eps: added to the std when scale="std".

    Returns:
      float32 [B]; 0 for padding rows and for groups whose rewards are all equal.
    """
    check_arrays({"rewards": (rewards, "b", "f"), "group_ids": (group_ids, "b", "i")})
    check_choice("scale", scale, ("none", "std"))
    valid, stats = group_stats(rewards, group_ids)
    adv = rewards - stats.mean
    if scale == "std":
        adv = adv / (stats.std + eps)
    return jnp.where(valid & ~stats.constant, adv, 0.0).astype(jnp.float32)


@kernel
def rloo(rewards: jax.Array, group_ids: jax.Array) -> jax.Array:
    """Leave-one-out advantage: `A_i = R_i - mean_{j in g(i), j != i} R_j`.

    Args:
      rewards: float32 [B].
      group_ids: int32 [B]; -1 marks a padding row.

    Returns:
      float32 [B]; 0 for padding rows, singleton groups and groups with all-equal rewards.
    """
    check_arrays({"rewards": (rewards, "b", "f"), "group_ids": (group_ids, "b", "i")})
    valid, stats = group_stats(rewards, group_ids)
    # R_i - (n mean - R_i) / (n - 1) = n / (n - 1) (R_i - mean), without the cancellation
    adv = stats.count / jnp.maximum(stats.count - 1, 1) * (rewards - stats.mean)
    keep = valid & ~stats.constant & (stats.count > 1)
    return jnp.where(keep, adv, 0.0).astype(jnp.float32)
