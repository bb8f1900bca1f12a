"""Jitted credit kernels over the padded batch (SPEC §1-3) and the credit-method registry.

Kernels take `[B]` / `[B, T]` arrays and return per-trajectory `[B]` or per-turn `[B, T]`
advantages; `to_tokens` moves either to the `[B, L]` token grid. Padding rows (group id -1),
padding turns and non-policy tokens always get exactly 0.
"""

from prover_jax.credit.criticsearch import criticsearch
from prover_jax.credit.gigpo import (
    anchor_ids_from_observations,
    discounted_returns,
    episode_advantage,
    gigpo,
)
from prover_jax.credit.outcome import grpo, rloo
from prover_jax.credit.prover import prover
from prover_jax.credit.registry import (
    Credit,
    CreditMethod,
    compute,
    get,
    names,
    parts,
    register,
)
from prover_jax.credit.spo import spo_chain, spo_chain_segments, spo_tree, spo_tree_values
from prover_jax.credit.tokens import high_prob_mask, per_turn, to_tokens

__all__ = [
    "Credit", "CreditMethod", "anchor_ids_from_observations", "compute", "criticsearch",
    "discounted_returns", "episode_advantage", "get", "gigpo", "grpo", "high_prob_mask", "names",
    "parts", "per_turn", "prover", "register", "rloo", "spo_chain", "spo_chain_segments",
    "spo_tree", "spo_tree_values", "to_tokens",
]
