"""The learner's loss against a numpy-loop oracle, hand-derived cases and config validation."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from prover_jax import credit
from prover_jax.learner import (
    LearnerConfig,
    LossConfig,
    OptimizerConfig,
    head_logprobs,
    next_token_logprobs,
    policy_loss,
)
from tpu.mesh import build_mesh
from tpu.mesh_config import BATCH_AXES, MeshConfig

B, L, V = 6, 12, 7


def oracle_weight(proximal: float, behaviour: float, cfg: LossConfig) -> tuple[float, bool]:
    """The importance weight of one token and whether the correction truncated or masked it."""
    w = math.exp(proximal - behaviour)
    if cfg.is_correction == "tis":
        return min(w, cfg.is_cap), w > cfg.is_cap
    if cfg.is_correction == "mis":
        kept = 1 / cfg.is_cap <= w <= cfg.is_cap
        return (w if kept else 0.0), not kept
    return 1.0, False


def oracle_loss(logprobs, old, adv, loss_mask, cfg: LossConfig, ref=None, dropped=None,
                proximal=None):
    """Loss and metrics by explicit loops over rows and tokens."""
    rows, length = loss_mask.shape
    mask = loss_mask.copy()
    mask[:, 0] = False
    if dropped is not None:
        mask &= ~dropped
    policy = np.zeros((rows, length))
    kl = np.zeros((rows, length))
    clipped = np.zeros((rows, length))
    gap = np.zeros((rows, length))
    behaviour_kl = np.zeros((rows, length))
    weight = np.zeros((rows, length))
    truncated = np.zeros((rows, length))
    if cfg.is_correction == "none":
        proximal = old
    elif proximal is None:
        proximal = logprobs
    for b in range(rows):
        for u in range(length):
            if not mask[b, u]:
                continue
            ratio = math.exp(logprobs[b, u] - proximal[b, u])
            weight[b, u], truncated[b, u] = oracle_weight(proximal[b, u], old[b, u], cfg)
            plain = ratio * adv[b, u]
            clip = min(max(ratio, 1 - cfg.clip_low), 1 + cfg.clip_high) * adv[b, u]
            policy[b, u] = -weight[b, u] * min(plain, clip)
            clipped[b, u] = float(clip < plain)
            gap[b, u] = abs(logprobs[b, u] - old[b, u])
            rho = math.exp(logprobs[b, u] - old[b, u])
            behaviour_kl[b, u] = rho - math.log(rho) - 1  # k3 of KL(behaviour || current)
            if ref is not None:
                d = ref[b, u] - logprobs[b, u]
                kl[b, u] = -d if cfg.kl_estimator == "k1" else math.exp(d) - d - 1

    def aggregate(term):
        if cfg.aggregation == "token-mean":
            return term[mask].sum() / mask.sum()
        if cfg.aggregation == "sequence-mean":
            means = [term[b][mask[b]].mean() for b in range(rows) if mask[b].any()]
            return sum(means) / len(means)
        real_rows = loss_mask.any(axis=1).sum()
        return term[mask].sum() / (real_rows * (cfg.dr_grpo_length or length))

    policy_loss_ = aggregate(policy)
    kl_loss = aggregate(kl)
    metrics = {"loss": policy_loss_ + cfg.kl_coef * kl_loss, "policy_loss": policy_loss_,
               "kl_loss": kl_loss, "kl": kl[mask].mean(), "clip_fraction": clipped[mask].mean(),
               "behaviour_gap": gap[mask].mean(), "behaviour_kl": behaviour_kl[mask].mean()}
    if cfg.is_correction != "none":
        metrics.update(is_weight=weight[mask].mean(), is_truncated=truncated[mask].mean(),
                       is_weight_max=weight[mask].max())
    return metrics


def random_inputs(seed: int):
    rng = np.random.default_rng(seed)
    loss_mask = rng.random((B, L)) < 0.6
    loss_mask[:, 0] = True  # column 0 must be ignored: nothing predicts it
    loss_mask[B - 1] = False  # a padding row
    logprobs = np.log(rng.uniform(0.05, 1.0, (B, L))).astype(np.float32)
    old = (logprobs + rng.normal(0, 0.4, (B, L))).astype(np.float32)  # ratios beyond the clip
    ref = (logprobs + rng.normal(0, 0.3, (B, L))).astype(np.float32)
    adv = (rng.normal(0, 1, (B, L)) * loss_mask).astype(np.float32)
    return logprobs, old, adv, loss_mask, ref


@pytest.mark.parametrize("estimator", ["k1", "k3"])
@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean", "dr-grpo"])
def test_loss_matches_numpy_oracle(aggregation, estimator):
    logprobs, old, adv, loss_mask, ref = random_inputs(seed=len(aggregation) + len(estimator))
    dropped = np.asarray(credit.high_prob_mask(old, loss_mask, 0.5))  # SPO's mask
    assert dropped.any() and (loss_mask & ~dropped).any()
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.1, kl_estimator=estimator,
                     aggregation=aggregation)
    loss, metrics = policy_loss(logprobs, old, adv, loss_mask, cfg, ref, dropped)
    expected = oracle_loss(logprobs, old, adv, loss_mask, cfg, ref, dropped)
    assert 0 < expected["clip_fraction"] < 1
    np.testing.assert_allclose(float(loss), expected["loss"], rtol=1e-5, atol=1e-6)
    for name, value in expected.items():
        np.testing.assert_allclose(float(metrics[name]), value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("correction", ["tis", "mis"])
@pytest.mark.parametrize("given_proximal", [False, True])
def test_decoupled_objective_matches_numpy_oracle(correction, given_proximal):
    """PPO's ratio against the proximal policy, each token weighted by its truncated (tis) or
    masked (mis) importance weight proximal / behaviour; the proximal policy given, or the
    current one at the update's start (one optimizer step per batch)."""
    logprobs, old, adv, loss_mask, ref = random_inputs(seed=11)
    rng = np.random.default_rng(3)
    proximal = (logprobs + rng.normal(0, 0.2, logprobs.shape)).astype(np.float32)
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.1, is_correction=correction,
                     is_cap=1.5)
    given = proximal if given_proximal else None
    loss, metrics = policy_loss(logprobs, old, adv, loss_mask, cfg, ref,
                                proximal_logprobs=given)
    expected = oracle_loss(logprobs, old, adv, loss_mask, cfg, ref, proximal=given)
    assert 0 < expected["is_truncated"] < 1  # the weights' cap acts on some tokens only
    if given_proximal:
        assert 0 < expected["clip_fraction"] < 1
    for name, value in {"loss": expected["loss"], **expected}.items():
        got = loss if name == "loss" else metrics[name]
        np.testing.assert_allclose(float(got), value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("correction", ["tis", "mis"])
def test_the_importance_weight_scales_the_gradient_and_carries_none_itself(correction):
    """With the proximal policy the current one, the ratio is 1 and the gradient of a token's
    term with respect to its log-prob is -w A times its aggregation weight: w scales the
    policy gradient, and no gradient flows through w."""
    logprobs, old, adv, loss_mask, _ = random_inputs(seed=5)
    cfg = LossConfig(is_correction=correction, is_cap=1.5)
    grad = jax.grad(lambda lp: policy_loss(lp, old, adv, loss_mask, cfg)[0])(logprobs)
    mask = loss_mask.copy()
    mask[:, 0] = False
    expected = np.zeros_like(logprobs)
    for b, u in zip(*np.nonzero(mask)):
        expected[b, u] = -oracle_weight(logprobs[b, u], old[b, u], cfg)[0] * adv[b, u]
    np.testing.assert_allclose(np.asarray(grad), expected / mask.sum(), rtol=1e-5, atol=1e-7)


def test_dr_grpo_constant_length_and_no_reference():
    logprobs, old, adv, loss_mask, _ = random_inputs(seed=7)
    cfg = LossConfig(aggregation="dr-grpo", dr_grpo_length=100)
    loss, metrics = policy_loss(logprobs, old, adv, loss_mask, cfg)
    expected = oracle_loss(logprobs, old, adv, loss_mask, cfg)
    np.testing.assert_allclose(float(loss), expected["loss"], rtol=1e-5, atol=1e-7)
    assert float(metrics["kl"]) == 0.0


def test_ppo_clip_hand_derived():
    # token 1: A=+1, r=1.5 -> min(1.5, clip 1.2) = 1.2, clipped   -> term -1.2
    # token 2: A=-1, r=0.5 -> min(-0.5, -clip 0.8) = -0.8, clipped -> term +0.8
    # token 3: A=+1, r=0.5 -> min(0.5, 0.8) = 0.5, not clipped     -> term -0.5
    # token-mean over the 3 tokens (column 0 never counts): (-1.2 + 0.8 - 0.5) / 3 = -0.3
    logprobs = np.log(np.array([[1.0, 0.6, 0.2, 0.2]], np.float32))
    old = np.log(np.array([[1.0, 0.4, 0.4, 0.4]], np.float32))
    adv = np.array([[5.0, 1.0, -1.0, 1.0]], np.float32)
    mask = np.array([[True, True, True, True]])
    loss, metrics = policy_loss(logprobs, old, adv, mask, LossConfig(clip_low=0.2,
                                                                     clip_high=0.2))
    np.testing.assert_allclose(float(loss), -0.3, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["clip_fraction"]), 2 / 3, rtol=1e-6)


def test_kl_estimators_hand_derived():
    # log pi = log 0.5, log pi_ref = log 0.25: k1 = log 2; k3 = 0.5 - log 0.5 - 1 = log 2 - 0.5
    logprobs = np.log(np.array([[1.0, 0.5]], np.float32))
    ref = np.log(np.array([[1.0, 0.25]], np.float32))
    zeros, mask = np.zeros((1, 2), np.float32), np.array([[False, True]])
    for estimator, value in (("k1", math.log(2)), ("k3", math.log(2) - 0.5)):
        cfg = LossConfig(kl_coef=2.0, kl_estimator=estimator)
        loss, metrics = policy_loss(logprobs, logprobs, zeros, mask, cfg, ref)
        np.testing.assert_allclose(float(metrics["kl"]), value, rtol=1e-6)
        np.testing.assert_allclose(float(loss), 2 * value, rtol=1e-6)


def test_garbage_off_the_mask_changes_nothing():
    logprobs, old, adv, loss_mask, ref = random_inputs(seed=3)
    cfg = LossConfig(kl_coef=0.5)
    clean, _ = policy_loss(logprobs, old, adv, loss_mask, cfg, ref)
    off = ~loss_mask
    dirty = [np.where(off, value, x) for x, value in ((old, -1e30), (adv, np.nan), (ref, 1e30))]
    loss, _ = policy_loss(logprobs, *dirty[:2], loss_mask, cfg, dirty[2])
    assert float(loss) == float(clean)
    grad = jax.grad(lambda lp: policy_loss(lp, *dirty[:2], loss_mask, cfg, dirty[2])[0])(
        jnp.asarray(logprobs))
    assert np.isfinite(np.asarray(grad)).all() and not np.asarray(grad)[off].any()


def test_next_token_logprobs_alignment_hand_derived():
    # logits at position 0 predict token 1: softmax([0, log 3]) -> p(token 1) = 3/4;
    # logits at position 1 predict token 2: uniform over 2 -> p = 1/2, entropy log 2
    logits = np.array([[[0.0, math.log(3)], [0.0, 0.0], [5.0, -5.0]]], np.float32)
    tokens = np.array([[0, 1, 0]], np.int32)
    logprobs, entropy = next_token_logprobs(logits, tokens)
    np.testing.assert_allclose(np.asarray(logprobs), [[0.0, math.log(0.75), math.log(0.5)]],
                               rtol=1e-6)
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    np.testing.assert_allclose(np.asarray(entropy), [[0.0, h0, math.log(2)]], rtol=1e-6)


def test_next_token_logprobs_match_numpy_loop():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (B, L, V)).astype(np.float32)
    tokens = rng.integers(0, V, (B, L)).astype(np.int32)
    logprobs, entropy = next_token_logprobs(logits, tokens)
    expected_lp, expected_h = np.zeros((B, L)), np.zeros((B, L))
    for b in range(B):
        for u in range(1, L):
            z = logits[b, u - 1].astype(np.float64)
            log_p = z - z.max() - np.log(np.exp(z - z.max()).sum())
            expected_lp[b, u] = log_p[tokens[b, u]]
            expected_h[b, u] = -(np.exp(log_p) * log_p).sum()
    np.testing.assert_allclose(np.asarray(logprobs), expected_lp, atol=2e-5)
    np.testing.assert_allclose(np.asarray(entropy), expected_h, atol=2e-5)


@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("chunk", [3, 4, 64])
def test_chunked_head_logprobs_equal_full_logits(chunk, recompute):
    """Values and gradients (through the log-probabilities, not the entropy) of the chunked
    head against `next_token_logprobs` on the materialised logits; chunks that divide L, that
    do not (padding), and one chunk larger than L; logits recomputed or kept for
    the backward pass."""
    rng = np.random.default_rng(chunk)
    b, l, d, v = 2, 10, 8, 37
    hidden = jnp.asarray(rng.normal(0, 1, (b, l, d)), jnp.float32)
    head = jnp.asarray(rng.normal(0, 1, (d, v)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, v, (b, l)), jnp.int32)
    weights = jnp.asarray(rng.normal(0, 1, (b, l)), jnp.float32)

    def full(h, w):
        logprobs, entropy = next_token_logprobs(jnp.einsum("bld,dv->blv", h, w), tokens)
        return jnp.sum(weights * logprobs), (logprobs, entropy)

    def chunked(h, w):
        logprobs, entropy = head_logprobs(h, w, tokens, chunk, recompute)
        return jnp.sum(weights * logprobs), (logprobs, entropy)

    (want_grads, (want_lp, want_h)) = jax.grad(full, argnums=(0, 1), has_aux=True)(hidden, head)
    (got_grads, (got_lp, got_h)) = jax.jit(jax.grad(chunked, argnums=(0, 1), has_aux=True))(
        hidden, head)
    np.testing.assert_allclose(got_lp, want_lp, atol=1e-5)
    np.testing.assert_allclose(got_h, want_h, atol=1e-5)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert float(jnp.abs(want_grads[1]).max()) > 0.1


@pytest.mark.parametrize("recompute", [True, False])
def test_head_on_needed_tokens_equals_the_full_head_there(recompute):
    """Values and gradients with only the `needed` tokens through the head (gathered into 6
    slots per row, in chunks of 4) against the head on every token; 0 elsewhere; a row with
    more needed tokens than slots is NaN (after column 0), not silently truncated."""
    rng = np.random.default_rng(7)
    b, l, d, v = 3, 12, 8, 29
    hidden = jnp.asarray(rng.normal(0, 1, (b, l, d)), jnp.float32)
    head = jnp.asarray(rng.normal(0, 1, (d, v)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, v, (b, l)), jnp.int32)
    weights = jnp.asarray(rng.normal(0, 1, (b, l)), jnp.float32)
    needed = np.zeros((b, l), bool)
    needed[0, [1, 4, 5, 11]] = True
    needed[1, 6:12] = True  # exactly as many as the slots, up to the last token
    needed = jnp.asarray(needed)  # row 2 needs nothing

    def loss(h, w, subset):
        args = (needed, 6) if subset else ()
        logprobs, entropy = head_logprobs(h, w, tokens, 4, recompute, *args)
        return jnp.sum(jnp.where(needed, weights * logprobs, 0.0)), (logprobs, entropy)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True), static_argnums=2)
    want_grads, (want_lp, want_h) = grad(hidden, head, False)
    got_grads, (got_lp, got_h) = grad(hidden, head, True)
    np.testing.assert_allclose(got_lp, np.where(needed, want_lp, 0.0), atol=1e-5)
    np.testing.assert_allclose(got_h, np.where(needed, want_h, 0.0), atol=1e-5)
    assert np.count_nonzero(got_lp) == int(needed.sum())
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, atol=1e-5)
    too_many = needed.at[2, 1:8].set(True)
    logprobs, _ = head_logprobs(hidden, head, tokens, 4, recompute, too_many, 6)
    logprobs = np.asarray(logprobs)
    assert np.isnan(logprobs[2, 1:]).all() and np.isfinite(logprobs[:2]).all()


@pytest.mark.parametrize("mesh_config, vocab, recompute, subset", [
    (MeshConfig(fsdp=8), 40, True, True),
    (MeshConfig(data=2, fsdp=2, model=2), 40, False, False),
    (MeshConfig(fsdp=8), 36, True, False),  # a vocabulary "fsdp" does not divide: all-reduced
])
def test_head_on_each_devices_rows_equals_the_head_on_the_whole_batch(mesh_config, vocab,
                                                                      recompute, subset):
    """With a mesh, each device runs the head on its own rows: the same values and gradients
    as without one, and the head's gradient leaves the devices reduce-scattered over "fsdp"
    where that divides the vocabulary."""
    mesh = build_mesh(mesh_config)
    rng = np.random.default_rng(vocab)
    b, l, d = 8, 11, 16
    hidden = jnp.asarray(rng.normal(0, 1, (b, l, d)), jnp.float32)
    head = jnp.asarray(rng.normal(0, 0.5, (d, vocab)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, vocab, (b, l)), jnp.int32)
    weights = jnp.asarray(rng.normal(0, 1, (b, l)), jnp.float32)
    args = (jnp.asarray(rng.random((b, l)) < 0.5), 10) if subset else ()

    def loss(h, w, on):
        logprobs, entropy = head_logprobs(h, w, tokens, 4, recompute, *args, mesh=on)
        return jnp.sum(weights * logprobs), (logprobs, entropy)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True), static_argnums=2)
    want = grad(hidden, head, None)
    rows = jax.device_put(hidden, NamedSharding(mesh, PartitionSpec(BATCH_AXES)))
    sharded_head = jax.device_put(head, NamedSharding(mesh, PartitionSpec("fsdp", "model")))
    got = grad(rows, sharded_head, mesh)
    for got_part, want_part in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(got_part, want_part, rtol=1e-5, atol=1e-5)
    program = grad.lower(rows, sharded_head, mesh).as_text()
    assert ("reduce_scatter" in program) == (vocab % mesh.shape["fsdp"] == 0)


def test_chunked_head_in_bf16_keeps_gradient_dtypes_and_values():
    """bf16 hidden states and head: cotangents come back in bf16, within bf16 rounding of the
    float32 gradients."""
    rng = np.random.default_rng(5)
    hidden = jnp.asarray(rng.normal(0, 1, (2, 12, 16)), jnp.float32)
    head = jnp.asarray(rng.normal(0, 0.5, (16, 50)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, 50, (2, 12)), jnp.int32)

    def loss(h, w):
        return jnp.sum(head_logprobs(h, w, tokens, 5)[0])

    exact = jax.grad(loss, argnums=(0, 1))(hidden, head)
    low = jax.jit(jax.grad(loss, argnums=(0, 1)))(hidden.astype(jnp.bfloat16),
                                                  head.astype(jnp.bfloat16))
    for got, want in zip(low, exact):
        assert got.dtype == jnp.bfloat16
        error = np.linalg.norm(np.asarray(got, np.float32) - want) / np.linalg.norm(want)
        assert error < 0.02, error


def test_all_masked_batch_gives_zero_not_nan():
    logprobs, old, adv, _, ref = random_inputs(seed=1)
    for aggregation in ("token-mean", "sequence-mean", "dr-grpo"):
        loss, metrics = policy_loss(logprobs, old, adv, np.zeros((B, L), bool),
                                    LossConfig(aggregation=aggregation, kl_coef=1.0), ref)
        assert float(loss) == 0.0 and all(np.isfinite(float(v)) for v in metrics.values())


@pytest.mark.parametrize("make, message", [
    (lambda: LossConfig(clip_low=0.0), "clip_low"),
    (lambda: LossConfig(clip_low=1.5), "clip_low"),
    (lambda: LossConfig(clip_high=-0.1), "clip_high"),
    (lambda: LossConfig(kl_coef=-1.0), "kl_coef"),
    (lambda: LossConfig(kl_estimator="k2"), "kl_estimator"),
    (lambda: LossConfig(aggregation="mean"), "aggregation"),
    (lambda: LossConfig(dr_grpo_length=0), "dr_grpo_length"),
    (lambda: LossConfig(is_correction="ppo"), "is_correction"),
    (lambda: LossConfig(is_correction="tis", is_cap=1.0), "is_cap"),
    (lambda: OptimizerConfig(learning_rate=-1e-3), "learning_rate"),
    (lambda: OptimizerConfig(decay="cosine", total_steps=10, warmup_steps=10), "total_steps"),
    (lambda: OptimizerConfig(decay="step"), "decay"),
    (lambda: OptimizerConfig(b2=1.5), "b2"),
    (lambda: OptimizerConfig(max_grad_norm=0.0), "max_grad_norm"),
    (lambda: LearnerConfig(micro_batches=0), "micro_batches"),
    (lambda: LearnerConfig(compute_dtype="float16"), "compute_dtype"),
])
def test_bad_config_is_a_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_missing_reference_and_bad_shapes_are_value_errors():
    logprobs, old, adv, loss_mask, _ = random_inputs(seed=2)
    with pytest.raises(ValueError, match="ref_logprobs: required"):
        policy_loss(logprobs, old, adv, loss_mask, LossConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logprobs, old, adv[:, :-1], loss_mask, LossConfig())
    with pytest.raises(ValueError, match="tokens"):
        next_token_logprobs(np.zeros((B, L, V), np.float32), np.zeros((B, L + 1), np.int32))
