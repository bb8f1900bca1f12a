"""Jitted credit kernels over the padded batch (SPEC §1-3) and the credit-method registry.

Kernels take `[B]` / `[B, T]` arrays and return per-trajectory `[B]` or per-turn `[B, T]`
advantages; `to_tokens` moves either to the `[B, L]` token grid. Padding rows (group id -1),
padding turns and non-policy tokens always get exactly 0. The names below load at first use
(`prover_jax.lazy`): the registry (`get`, `names`, `register`) without JAX, the kernels with it.
"""

from prover_jax.lazy import exports

_SOURCES = {
    "Credit": "registry", "CreditMethod": "registry", "get": "registry", "names": "registry",
    "register": "registry", "compute": "methods", "parts": "methods",
    "criticsearch": "critic_labels", "anchor_ids_from_observations": "step_groups",
    "discounted_returns": "step_groups", "episode_advantage": "step_groups",
    "gigpo": "step_groups", "grpo": "outcome", "rloo": "outcome", "prover": "segment_bonus",
    "progress_credit": "progress",
    "spo_chain": "spo", "spo_chain_segments": "spo", "spo_tree": "spo", "spo_tree_values": "spo",
    "high_prob_mask": "tokens", "per_turn": "tokens", "to_tokens": "tokens",
}
__all__ = sorted(_SOURCES)
__getattr__ = exports(__name__, _SOURCES)
