"""CriticSearch: a retrospective critic's good/bad turn labels mixed into GRPO (SPEC §3).

`A[b, t] = w_outcome * A_GRPO[b] + w_critic * label[b, t]` (0.75 / 0.25, ProVer paper eq. 5) on
every scored turn of a labelled group. Turns the critic does not score (label 0, e.g. a SearchQA
turn that is not a valid search) keep the GRPO advantage. A group in which any row lacks valid
labels falls back to GRPO as a whole: the kernel enforces this, so the host only flags rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prover_jax.checks import check_arrays, kernel
from prover_jax.credit.segments import dense_ids
from prover_jax.credit.tokens import per_turn


@kernel
def criticsearch(base: jax.Array, group_ids: jax.Array, turn_valid: jax.Array,
                 labels: jax.Array, labelled: jax.Array,
                 outcome_weight: float | jax.Array = 0.75,
                 critic_weight: float | jax.Array = 0.25) -> jax.Array:
    """CriticSearch per-turn advantages.

    Args:
      base: float32 [B] GRPO advantages.
      group_ids: int32 [B]; -1 marks padding.
      turn_valid: bool [B, T].
      labels: int32 [B, T] critic label per turn: +1 good, -1 bad, 0 not scored.
      labelled: bool [B] the critic returned valid labels for this row.
      outcome_weight, critic_weight: the mix (0.75, 0.25).

    Returns:
      float32 [B, T]; 0 on padding turns.
    """
    check_arrays({
        "base": (base, "b", "f"), "group_ids": (group_ids, "b", "i"),
        "turn_valid": (turn_valid, "b t", "b"), "labels": (labels, "b t", "i"),
        "labelled": (labelled, "b", "b"),
    })
    valid = group_ids >= 0
    ids = dense_ids((group_ids,), valid)
    n = ids.shape[0]
    group_ok = jax.ops.segment_min(labelled.astype(jnp.int32), ids, num_segments=n)
    row_ok = valid & (group_ok[jnp.minimum(ids, n - 1)] > 0)
    mixed = outcome_weight * base[:, None] + critic_weight * labels.astype(jnp.float32)
    use = row_ok[:, None] & (labels != 0)
    return jnp.where(use & turn_valid, mixed, per_turn(base, turn_valid, "base"))
