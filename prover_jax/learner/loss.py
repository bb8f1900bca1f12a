"""PPO-clip loss over the padded token batch, with KL to a reference policy and entropy.

Alignment. The model reads `tokens [B, L]` and its logits at position u predict token u+1, so
the log-probability of token u (the quantity the sampler recorded when it emitted u) comes from
the logits at u-1:

    logprobs[b, u] = log_softmax(logits[b, u - 1])[tokens[b, u]]    for u >= 1

Every per-token array of the learner (`logprobs`, `old_logprobs`, `ref_logprobs`, `advantages`,
`loss_mask`) is indexed by the token it scores, on the same grid as `tokens`. Column 0 has no
context to be predicted from: its log-probability is 0 and it never counts in the loss (a
conversation opens with a prompt, so `validate_train_batch` rejects a policy token there).

Aggregation. The loss is a weighted sum `Σ_bu w[b, u] · term[b, u]` with weights computed once
from the whole batch's mask (`loss_weights`), so splitting the batch into micro-batches and
adding their sums gives the same loss and gradient as one big batch:

- token-mean: `w = m / Σ m` (every loss token of the batch counts equally);
- sequence-mean: `w = m / (n_b · S)` with `n_b` the row's loss tokens and `S` the rows that
  have any;
- dr-grpo: `w = m / (N · C)` with `N` the real rows (any `loss_mask` token) and `C` a constant
  length (Dr.GRPO's normaliser; default the padded L), so a token's weight never depends on
  its sequence's length.

`m` is `loss_mask` minus the credit method's dropped tokens (SPO's high-probability ones,
`credit.high_prob_mask`) minus column 0.
Metrics that describe the policy (entropy, clip fraction, the raw KL estimate) are token means
whatever the aggregation.

Glossary: b rows, l tokens, v vocab.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from models.qwen.matmul import dense
from models.qwen.sharding import set_in_rows
from prover_jax.checks import check_arrays
from prover_jax.learner.config import LossConfig
from tpu.mesh_config import BATCH_AXES


class Weights(NamedTuple):
    """Per-token weights of one batch, both float32 [B, L] and zero off the loss tokens."""

    loss: jax.Array  # the aggregation mode's weights: the loss is Σ loss · term
    mean: jax.Array  # token-mean weights, for metrics


@jax.jit
def next_token_logprobs(logits: jax.Array, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Log-probability and predictive entropy of every token under the logits before it.

    Args:
      logits: float [B, L, V]; logits[b, u] predicts tokens[b, u + 1].
      tokens: int [B, L].

    Returns:
      (logprobs, entropy), float32 [B, L]: `logprobs[b, u] = log p(tokens[b, u] | tokens[b, :u])`
      and `entropy[b, u]` the entropy of that distribution, for u >= 1; column 0 is 0. Entropy is
      a metric and carries no gradient.
    """
    check_arrays({"logits": (logits, "b l v", "f"), "tokens": (tokens, "b l", "i")})
    logprobs, entropy, _ = _token_statistics(logits.astype(jnp.float32), _following(tokens))
    return _shift_right(logprobs), _shift_right(jax.lax.stop_gradient(entropy))


def _following(tokens: jax.Array) -> jax.Array:
    """[B, L] the token each position predicts (0 after the last); for a mask, whether the
    next token is in it."""
    return jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)


def _token_statistics(logits: jax.Array, targets: jax.Array
                      ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """float32 logits [..., V], int targets [...] -> float32 [...] log p(target), the
    distribution's entropy and its log-sum-exp."""
    normaliser = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    probs = jnp.exp(logits - normaliser[..., None])
    entropy = normaliser - jnp.sum(probs * logits, axis=-1)
    return picked - normaliser, entropy, normaliser


def head_logprobs(hidden: jax.Array, head: jax.Array, tokens: jax.Array, chunk: int,
                  recompute: bool = True, needed: jax.Array | None = None,
                  positions: int | None = None, mesh: Mesh | None = None
                  ) -> tuple[jax.Array, jax.Array]:
    """`next_token_logprobs(hidden @ head, tokens)` without the [B, L, V] logits in memory.

    The LM head, log-softmax and entropy run over `chunk` positions of every row at a time in
    `lax.scan`. With `recompute` the backward pass recomputes each chunk's logits (one more head
    matmul) instead of keeping anything [B, L, V], so memory for the head is O(B * chunk * V)
    whatever L (a 151k-entry vocabulary makes [B, L, V] float32 logits the largest array of a
    training step). Without it the forward pass keeps every chunk's logits, float32 [B, L, V],
    and the backward pass reads them.

    With `needed`, only the needed tokens go through the head: each row's hidden states that
    predict them are gathered into `positions` slots (a static count, at least the most needed
    tokens of any row), so the head's work shrinks by L / positions; the other tokens get 0.

    With `mesh`, the rows stay split over its batch axes and each device runs the chunks of
    its own rows (`jax.shard_map`): the head is gathered once per pass, not once per chunk, and
    its gradient is summed over the chunks on each device in float32, then reduce-scattered
    once over "fsdp" along the vocabulary (where that divides; else all-reduced) and summed
    over "data". Without it XLA partitions the scan and gathers the head, and all-reduces its
    whole float32 gradient, in every chunk.

    Args:
      hidden: float [B, L, D] final normalised hidden states (`forward(..., hidden_only=True)`).
      head: float [D, V] the LM head (`models.qwen.lm_head`).
      tokens: int [B, L].
      chunk: at most this many positions per chunk.
      recompute: recompute the logits in the backward pass (else keep them).
      needed: bool [B, L] the tokens whose log-probabilities are wanted (e.g. the trained
        tokens), or None for all.
      positions: slots per row for the needed tokens; a row with more needed tokens gets NaN.
      mesh: the device mesh whose batch axes split the rows (B a multiple of their product),
        or None.

    Returns:
      (logprobs, entropy), float32 [B, L], as `next_token_logprobs` (0 where not `needed`); the
      gradient reaches `hidden` and `head` through the log-probabilities only.
    """
    check_arrays({"hidden": (hidden, "b l d", "f"), "head": (head, "d v", "f"),
                  "tokens": (tokens, "b l", "i")})
    following = _following(tokens)
    if needed is None:
        return tuple(map(_shift_right, _padded_chunks(hidden, head, following, chunk,
                                                      recompute, mesh)))
    check_arrays({"needed": (needed, "b l", "b")})
    length = tokens.shape[1]
    predicting = _following(needed)
    slots = jax.vmap(lambda m: jnp.nonzero(m, size=positions, fill_value=length)[0])(predicting)
    clipped = jnp.minimum(slots, length - 1)
    rows = jnp.take_along_axis(hidden, clipped[..., None], axis=1)
    stats = _padded_chunks(rows, head, jnp.take_along_axis(following, clipped, axis=1), chunk,
                           recompute, mesh)
    overflow = jnp.sum(predicting, axis=1, keepdims=True) > positions
    return tuple(_shift_right(jnp.where(overflow, jnp.nan, _scatter_rows(x, slots, length)))
                 for x in stats)


def _scatter_rows(values: jax.Array, slots: jax.Array, length: int) -> jax.Array:
    """[B, P] values at positions `slots` [B, P] of [B, length] zeros; slots >= length are
    dropped."""
    return set_in_rows(jnp.zeros((values.shape[0], length), values.dtype), slots, values)


def _padded_chunks(hidden, head, following, chunk, recompute, mesh):
    """`_chunked_logprobs` on [B, P, ...] inputs padded up to a multiple of the chunk; returns
    (logprobs, entropy) [B, P] unshifted."""
    length = following.shape[1]
    count = -(-length // chunk)
    chunk = -(-length // count)  # the most even split into `count` chunks of at most `chunk`
    pad = [(0, 0), (0, count * chunk - length)]
    logprobs, entropy = _chunked_logprobs(jnp.pad(hidden, [*pad, (0, 0)]), head,
                                          jnp.pad(following, pad), chunk, recompute, mesh)
    return logprobs[:, :length], entropy[:, :length]


def _chunks(x: jax.Array, chunk: int) -> jax.Array:
    """[B, n * chunk, ...] -> [n, B, chunk, ...]."""
    return jnp.moveaxis(x.reshape(x.shape[0], -1, chunk, *x.shape[2:]), 1, 0)


def _unchunk(x: jax.Array) -> jax.Array:
    """[n, B, chunk, ...] -> [B, n * chunk, ...]."""
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], -1, *x.shape[3:])


def _chunk_logits(hidden: jax.Array, head: jax.Array) -> jax.Array:
    return dense(hidden, head, preferred_element_type=jnp.float32)


def _chunked_forward(hidden, head, following, chunk, keep_logits):
    """(logprobs, entropy) [B, L] of the tokens `following` each position, and what the
    backward pass needs: the log-sum-exp [B, L] and, if `keep_logits`, the logits
    [n, B, chunk, V] (else None)."""
    def body(_, xs):
        h, target = xs
        logits = _chunk_logits(h, head)
        return None, (*_token_statistics(logits, target), logits if keep_logits else None)

    _, (*outs, logits) = jax.lax.scan(body, None, (_chunks(hidden, chunk),
                                                   _chunks(following, chunk)))
    logprobs, entropy, normaliser = map(_unchunk, outs)
    return (logprobs, entropy), (normaliser, logits)


def _per_device(fn, mesh: Mesh, in_specs, out_specs):
    """`fn` run on each device's rows: manual over the batch axes, "model" left to XLA."""
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         axis_names=set(BATCH_AXES), check_vma=False)


_ROWS = PartitionSpec(BATCH_AXES)
_CHUNKED_ROWS = PartitionSpec(None, BATCH_AXES)  # [n, B, ...]
_WHOLE = PartitionSpec()


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _chunked_logprobs(hidden, head, following, chunk, recompute, mesh):
    return _sharded_forward(hidden, head, following, chunk, False, mesh)[0]


def _sharded_forward(hidden, head, following, chunk, keep_logits, mesh):
    """`_chunked_forward`, on each device's rows when there is a mesh."""
    forward = functools.partial(_chunked_forward, chunk=chunk, keep_logits=keep_logits)
    if mesh is None:
        return forward(hidden, head, following)
    logits = _CHUNKED_ROWS if keep_logits else None
    return _per_device(forward, mesh, (_ROWS, _WHOLE, _ROWS),
                       ((_ROWS, _ROWS), (_ROWS, logits)))(hidden, head, following)


def _chunked_logprobs_fwd(hidden, head, following, chunk, recompute, mesh):
    out, (normaliser, logits) = _sharded_forward(hidden, head, following, chunk,
                                                 not recompute, mesh)
    return out, (hidden, head, following, normaliser, logits)


def _chunked_backward(hidden, head, following, normaliser, d_logprobs, kept, chunk):
    """d_hidden [B, L, D] and the float32 head gradient [D, V] summed over the chunks."""
    def body(d_head, xs):
        h, target, lse, g, logits = xs
        probs = jnp.exp((_chunk_logits(h, head) if logits is None else logits) - lse[..., None])
        picked = jnp.arange(head.shape[1]) == target[..., None]
        d_logits = ((picked - probs) * g[..., None]).astype(head.dtype)
        d_h = dense(d_logits, head.T, preferred_element_type=jnp.float32)
        d_head = d_head + jnp.matmul(h.reshape(-1, h.shape[-1]).T,
                                     d_logits.reshape(-1, d_logits.shape[-1]),
                                     preferred_element_type=jnp.float32)
        return d_head, d_h.astype(hidden.dtype)

    xs = (*(_chunks(x, chunk) for x in (hidden, following, normaliser, d_logprobs)), kept)
    d_head, d_hidden = jax.lax.scan(body, jnp.zeros(head.shape, jnp.float32), xs)
    return _unchunk(d_hidden), d_head


def _chunked_logprobs_bwd(chunk, recompute, mesh, residuals, cotangents):
    hidden, head, following, normaliser, kept = residuals
    d_logprobs = cotangents[0].astype(jnp.float32)  # entropy is a metric: no gradient
    backward = functools.partial(_chunked_backward, chunk=chunk)
    if mesh is None:
        d_hidden, d_head = backward(hidden, head, following, normaliser, d_logprobs, kept)
        return d_hidden, d_head.astype(head.dtype), None
    scatter = head.shape[1] % mesh.shape["fsdp"] == 0

    def on_device(*args):
        d_hidden, d_head = backward(*args)
        if scatter:
            d_head = jax.lax.psum_scatter(d_head, "fsdp", scatter_dimension=1, tiled=True)
        else:
            d_head = jax.lax.psum(d_head, "fsdp")
        return d_hidden, jax.lax.psum(d_head, "data").astype(head.dtype)

    in_specs = (_ROWS, _WHOLE, _ROWS, _ROWS, _ROWS, None if kept is None else _CHUNKED_ROWS)
    out_specs = (_ROWS, PartitionSpec(None, "fsdp") if scatter else _WHOLE)
    d_hidden, d_head = _per_device(on_device, mesh, in_specs, out_specs)(
        hidden, head, following, normaliser, d_logprobs, kept)
    return d_hidden, d_head, None


_chunked_logprobs.defvjp(_chunked_logprobs_fwd, _chunked_logprobs_bwd)


def _shift_right(x: jax.Array) -> jax.Array:
    """[B, L] values at u-1 moved to u; column 0 becomes 0."""
    return jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)


def trained_tokens(loss_mask: jax.Array, dropped: jax.Array | None = None) -> jax.Array:
    """bool [B, L]: the tokens the loss trains on.

    `loss_mask` without column 0 (no prediction for it) and, for SPO, without the tokens of
    `dropped` (bool [B, L], `credit.high_prob_mask`).
    """
    mask = jnp.asarray(loss_mask).at[:, 0].set(False)
    return mask if dropped is None else mask & ~dropped


def loss_weights(mask: jax.Array, loss_mask: jax.Array, cfg: LossConfig) -> Weights:
    """Per-token weights of the aggregation mode (see the module docstring).

    Args:
      mask: bool [B, L], the trained tokens (`trained_tokens`).
      loss_mask: bool [B, L], the batch's policy tokens; its rows with any token are the
        sequences Dr.GRPO divides by.
      cfg: LossConfig.

    Returns:
      Weights; an all-false mask gives all-zero weights (a zero loss, not NaN).
    """
    check_arrays({"mask": (mask, "b l", "b"), "loss_mask": (loss_mask, "b l", "b")})
    m = mask.astype(jnp.float32)
    mean = m / jnp.maximum(m.sum(), 1.0)
    if cfg.aggregation == "token-mean":
        loss = mean
    elif cfg.aggregation == "sequence-mean":
        per_row = m.sum(axis=1, keepdims=True)
        rows = jnp.maximum((per_row > 0).sum(), 1)
        loss = m / jnp.maximum(per_row, 1.0) / rows
    else:
        length = cfg.dr_grpo_length or mask.shape[1]
        rows = jnp.maximum(loss_mask.any(axis=1).sum(), 1)
        loss = m / (rows * length)
    return Weights(loss, mean)


def token_terms(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array,
                mask: jax.Array, cfg: LossConfig, ref_logprobs: jax.Array | None = None,
                proximal_logprobs: jax.Array | None = None) -> dict[str, jax.Array]:
    """PPO-clip surrogate, clipping indicator, importance weight and KL estimate of every token.

    With `r = exp(logprobs - proximal)` and advantage A, the term is
    `policy = -w · min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)`; `clipped` is 1 where the
    clipped branch is the smaller one (its gradient is zero there). Without a correction
    (`cfg.is_correction == "none"`) the proximal policy is the behaviour policy
    (`old_logprobs`) and w = 1. With one, the proximal log-probs are `proximal_logprobs`, by
    default the current ones without their gradient (the learner's at the start of the update:
    an update takes one optimizer step), and w is the truncated ("tis") or masked ("mis")
    importance weight of proximal / behaviour (`LossConfig`). KL to the reference: k1
    `= logprobs - ref_logprobs`; k3 `= exp(ref - logprobs) - (ref - logprobs) - 1`. Log-ratios
    and advantages are zeroed off `mask` first, so whatever lies there (padding, prompt tokens)
    cannot overflow into NaN.

    Args:
      logprobs, old_logprobs, advantages: float [B, L].
      mask: bool [B, L], the trained tokens.
      cfg: LossConfig.
      ref_logprobs: float [B, L]; required when `cfg.kl_coef > 0`.
      proximal_logprobs: float [B, L] or None (above).

    The behaviour terms compare the current policy with the behaviour policy: `|log ρ|` and the
    k3 estimate `ρ - log ρ - 1` of KL(behaviour || current), ρ = current / behaviour. Before
    the first update the params are the sampler's, so they measure the sampler-learner
    numerical mismatch.

    Returns:
      {"policy", "clipped", "is_weight", "is_truncated", "kl", "behaviour_gap",
      "behaviour_kl"}: float32 [B, L] each ("kl" is 0 without a reference; "is_weight" 1 and
      "is_truncated" 0 without a correction; "is_truncated" marks the tokens tis truncates or
      mis masks).
    """
    behaviour_log_ratio = jnp.where(mask, logprobs - old_logprobs, 0.0)
    if cfg.is_correction == "none":
        proximal = old_logprobs
    else:
        proximal = (jax.lax.stop_gradient(logprobs) if proximal_logprobs is None
                    else proximal_logprobs)
    log_ratio = jnp.where(mask, logprobs - proximal, 0.0)
    weight, truncated = importance_weights(jnp.where(mask, proximal - old_logprobs, 0.0), cfg)
    advantages = jnp.where(mask, advantages, 0.0)
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * advantages
    terms = {"policy": -weight * jnp.minimum(unclipped, clipped),
             "clipped": (clipped < unclipped).astype(jnp.float32),
             "is_weight": weight, "is_truncated": truncated,
             "behaviour_gap": jnp.abs(behaviour_log_ratio),
             # ρ - log ρ - 1 without rounding
             "behaviour_kl": jnp.expm1(behaviour_log_ratio) - behaviour_log_ratio}
    if ref_logprobs is None:
        terms["kl"] = jnp.zeros_like(log_ratio)
    else:
        ref_log_ratio = jnp.where(mask, ref_logprobs - logprobs, 0.0)
        terms["kl"] = (-ref_log_ratio if cfg.kl_estimator == "k1"
                       else jnp.exp(ref_log_ratio) - ref_log_ratio - 1.0)
    return terms


def importance_weights(log_w: jax.Array, cfg: LossConfig) -> tuple[jax.Array, jax.Array]:
    """Each token's importance weight from log(proximal / behaviour) `log_w` [B, L], and
    whether the correction truncated (tis) or masked (mis) it: float32 [B, L] each; weights
    of 1 and nothing truncated without a correction. The weight carries no gradient."""
    log_w = jax.lax.stop_gradient(log_w)
    if cfg.is_correction == "none":
        return jnp.ones_like(log_w), jnp.zeros_like(log_w)
    w, cap = jnp.exp(log_w), jnp.float32(cfg.is_cap)
    if cfg.is_correction == "tis":
        return jnp.minimum(w, cap), (w > cap).astype(jnp.float32)
    kept = jnp.abs(log_w) <= jnp.log(cap)
    return jnp.where(kept, w, 0.0), (~kept).astype(jnp.float32)


def weighted_loss(logprobs: jax.Array, entropy: jax.Array, old_logprobs: jax.Array,
                  advantages: jax.Array, mask: jax.Array, weights: Weights, cfg: LossConfig,
                  ref_logprobs: jax.Array | None = None,
                  proximal_logprobs: jax.Array | None = None) -> dict[str, jax.Array]:
    """The loss and its metrics as weighted sums over one (micro-)batch.

    Sums over micro-batches of the same batch (with weights from the whole batch) add up to the
    whole batch's values.

    Args:
      logprobs, entropy: float [B, L] from `next_token_logprobs` under the current params.
      old_logprobs, advantages: float [B, L].
      mask: bool [B, L], the trained tokens.
      weights: `loss_weights` of the whole batch, sliced like the other arrays.
      cfg: LossConfig.
      ref_logprobs: float [B, L] or None.
      proximal_logprobs: float [B, L] or None (`token_terms`).

    Returns:
      float32 scalars: "loss" (`policy_loss + kl_coef · kl_loss`), "policy_loss", "kl_loss"
      (the KL aggregated like the loss), token means "kl", "entropy", "clip_fraction",
      "behaviour_gap" (mean |log ρ|) and "behaviour_kl" (k3 of KL(behaviour || current));
      with a correction also "is_weight", "is_truncated" (the share of tokens the correction
      truncated or masked) and "is_weight_max" (the largest weight of a trained token).
    """
    check_arrays({"logprobs": (logprobs, "b l", "f"), "entropy": (entropy, "b l", "f"),
                  "old_logprobs": (old_logprobs, "b l", "f"),
                  "advantages": (advantages, "b l", "f"), "mask": (mask, "b l", "b"),
                  "weights.loss": (weights.loss, "b l", "f"),
                  "weights.mean": (weights.mean, "b l", "f")})
    if cfg.kl_coef > 0 and ref_logprobs is None:
        raise ValueError("ref_logprobs: required when kl_coef > 0")
    terms = token_terms(logprobs, old_logprobs, advantages, mask, cfg, ref_logprobs,
                        proximal_logprobs)
    policy_loss = jnp.sum(weights.loss * terms["policy"])
    kl_loss = jnp.sum(weights.loss * terms["kl"])
    metrics = {"loss": policy_loss + cfg.kl_coef * kl_loss, "policy_loss": policy_loss,
               "kl_loss": kl_loss, "kl": jnp.sum(weights.mean * terms["kl"]),
               "entropy": jnp.sum(weights.mean * entropy),
               "clip_fraction": jnp.sum(weights.mean * terms["clipped"]),
               "behaviour_gap": jnp.sum(weights.mean * terms["behaviour_gap"]),
               "behaviour_kl": jnp.sum(weights.mean * terms["behaviour_kl"])}
    if cfg.is_correction != "none":
        metrics.update(
            is_weight=jnp.sum(weights.mean * terms["is_weight"]),
            is_truncated=jnp.sum(weights.mean * terms["is_truncated"]),
            is_weight_max=jnp.max(jnp.where(mask, terms["is_weight"], 0.0), initial=0.0))
    return metrics


@functools.partial(jax.jit, static_argnames="cfg")
def policy_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array,
                loss_mask: jax.Array, cfg: LossConfig, ref_logprobs: jax.Array | None = None,
                dropped: jax.Array | None = None, entropy: jax.Array | None = None,
                proximal_logprobs: jax.Array | None = None
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The PPO-clip loss of one whole batch, from per-token log-probabilities.

    Args:
      logprobs: float [B, L], current policy (`next_token_logprobs`); the gradient flows here.
      old_logprobs: float [B, L], the policy that sampled the batch.
      advantages: float [B, L], per-token advantages (a credit kernel's output).
      loss_mask: bool [B, L], policy tokens.
      cfg: LossConfig.
      ref_logprobs: float [B, L], reference policy; required when `cfg.kl_coef > 0`.
      dropped: bool [B, L], tokens to leave out of the loss (e.g. SPO's `credit.high_prob_mask`).
      entropy: float [B, L], for the entropy metric (0 when None).
      proximal_logprobs: float [B, L], the proximal policy of the decoupled objective
        (`LossConfig.is_correction`); None: the current log-probs without their gradient,
        right for a trainer that takes one optimizer step per batch.

    Returns:
      (loss scalar, metrics of `weighted_loss`).
    """
    mask = trained_tokens(loss_mask, dropped)
    weights = loss_weights(mask, loss_mask, cfg)
    entropy = jnp.zeros_like(logprobs) if entropy is None else entropy
    metrics = weighted_loss(logprobs, entropy, old_logprobs, advantages, mask, weights, cfg,
                            ref_logprobs, proximal_logprobs)
    return metrics["loss"], metrics
