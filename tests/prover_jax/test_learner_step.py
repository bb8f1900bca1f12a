"""The train step on a tiny Qwen3: finite differences, micro-batches, sharding, bf16, inputs.

Every Learner here is built from one of a few configs, so each step function compiles once for
the whole test session (`Learner` shares compiled functions between equal setups).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
import pytest

from models import qwen
from prover_jax import credit
from prover_jax.batch import Batch, Message, Trajectory, pack
from prover_jax.learner import (
    Learner,
    LearnerConfig,
    LossConfig,
    OptimizerConfig,
    TrainBatch,
    policy_loss,
    validate_train_batch,
)
from prover_jax.learner.optim import decay_mask, schedule
from prover_jax.learner.step import batch_gradients, head_positions
from tpu.mesh import MeshConfig, build_mesh

CFG = qwen.QwenConfig(model_type="qwen3", vocab_size=128, hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)
FP32 = LearnerConfig(
    loss=LossConfig(clip_low=0.2, clip_high=0.28, kl_coef=0.05),
    optimizer=OptimizerConfig(learning_rate=3e-3, decay="cosine", total_steps=20,
                              weight_decay=0.1),
    compute_dtype="float32")
ROWS, LENGTH = 8, 32


def init_params(seed: int = 0):
    """Random float32 params: N(0, 0.1) around each weight's usual init (1 for norms).

    Drawn with numpy: `qwen.init` compiles a threefry program per weight shape, seconds on CPU.
    """
    rng = np.random.default_rng(seed)

    def draw(info: qwen.ArrayInfo) -> np.ndarray:
        centre = 1.0 if info.init == "ones" else 0.0
        return (centre + rng.normal(0, 0.1, info.shape)).astype(np.float32)

    return jax.tree.map(draw, qwen.describe(CFG), is_leaf=lambda x: isinstance(x, qwen.ArrayInfo))


def conversation(rng: np.random.Generator, reward: float) -> Trajectory:
    """A system prompt, then 1-3 turns of (assistant action, tool observation)."""
    def ids(n):
        return rng.integers(1, CFG.vocab_size, n).tolist()

    messages = [Message(ids(3), "system")]
    for t in range(int(rng.integers(1, 4))):
        messages += [Message(ids(int(rng.integers(2, 5))), "assistant", t), Message(ids(2), "tool")]
    return Trajectory(messages, reward)


def make_batch(seed: int, old_logprobs: np.ndarray | None = None) -> TrainBatch:
    """ROWS conversations in two groups, random per-token advantages, perturbed old and
    reference log-probabilities (so some ratios fall outside the clip range), SPO's mask."""
    rng = np.random.default_rng(seed)
    groups = [[conversation(rng, float(rng.integers(0, 2))) for _ in range(ROWS // 2)]
              for _ in range(2)]
    batch = pack(groups, min_len=LENGTH, max_len=LENGTH)
    mask = batch.loss_mask
    uniform = np.full(mask.shape, -np.log(CFG.vocab_size), np.float32)
    base = uniform if old_logprobs is None else old_logprobs
    noise = rng.normal(0, 0.2, (2, *mask.shape)).astype(np.float32)
    advantages = (rng.normal(0, 1, mask.shape) * mask).astype(np.float32)
    old = base + noise[0]
    # SPO's mask at a threshold that a random 128-token policy reaches on some tokens
    dropped = np.asarray(credit.high_prob_mask(old, mask, 1 / CFG.vocab_size))
    return TrainBatch(batch, advantages, old, base + noise[1], dropped)


@pytest.fixture(scope="module")
def single():
    return Learner(CFG, FP32)


@pytest.fixture(scope="module")
def batches(single):
    """Two batches whose old log-probabilities are near the initial policy's."""
    params = single.init(init_params()).params
    return [make_batch(seed, np.asarray(single.logprobs(params, make_batch(seed).batch.tokens)))
            for seed in range(2)]


def run(learner: Learner, batches, steps: int = 2):
    state = learner.init(init_params())
    history = []
    for i in range(steps):
        state, metrics = learner.train_step(state, batches[i % len(batches)])
        history.append(jax.device_get(metrics))
    return jax.device_get(state), history


def assert_trees_close(actual, expected, atol):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), atol=atol, rtol=1e-5)


@pytest.fixture(scope="module")
def reference_run(single, batches):
    return run(single, batches)


def test_logprobs_follow_next_token_alignment(single, batches):
    params = init_params()
    tokens = batches[0].batch.tokens
    positions = np.broadcast_to(np.arange(LENGTH, dtype=np.int32), tokens.shape)
    logits, _ = jax.jit(qwen.forward, static_argnums=1)(params, CFG, tokens, positions)
    log_p = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    expected = np.zeros(tokens.shape, np.float32)
    for b in range(ROWS):
        for u in range(1, LENGTH):
            expected[b, u] = log_p[b, u - 1, tokens[b, u]]
    actual = single.logprobs(single.init(params).params, tokens)
    np.testing.assert_allclose(np.asarray(actual), expected, atol=1e-5)


@pytest.fixture(scope="module")
def gradients(single, batches):
    """Gradients and metrics of batch 0 at the initial params with the LM head on every token,
    by micro-batch count; "remat" also keeps the head's logits instead of recomputing them;
    "trained" runs the head on the trained tokens only (`head_positions`)."""
    params = single.init(init_params()).params
    positions = head_positions(batches[0], buckets=4)
    assert positions is not None and positions < LENGTH
    out = {}
    for name, count, remat, slots in ((1, 1, False, None), (4, 4, False, None),
                                      ("remat", 1, True, None), ("trained", 4, False, positions)):
        config = dataclasses.replace(FP32, micro_batches=count, remat=remat,
                                     recompute_logits=not remat)
        compute = jax.jit(functools.partial(
            batch_gradients, model_cfg=CFG, cfg=config, mesh=single.mesh,
            shardings=single.state_shardings.params, head_positions=slots))
        out[name] = jax.device_get(compute(params, batches[0]))
    return params, out


def test_gradients_match_finite_differences(single, batches, gradients):
    batch = batches[0]
    params, by_count = gradients
    grads, metrics = by_count[4]

    def loss_of(p):
        logprobs = single.logprobs(p, batch.batch.tokens)
        return float(policy_loss(logprobs, batch.old_logprobs, batch.advantages,
                                 batch.batch.loss_mask, FP32.loss, batch.ref_logprobs,
                                 batch.dropped)[0])

    np.testing.assert_allclose(float(metrics["loss"]), loss_of(params), rtol=1e-5, atol=1e-7)
    embed_only = jax.tree.map(np.zeros_like, grads)
    embed_only["embed"] = grads["embed"]
    h = 1e-3
    for name, direction in {"all": grads, "embed only": embed_only}.items():
        norm = float(np.sqrt(sum(np.sum(d * d) for d in jax.tree.leaves(direction))))
        shifted = [jax.tree.map(lambda p, d, s=sign * h / norm: p + s * d, params, direction)
                   for sign in (1, -1)]
        numeric = (loss_of(shifted[0]) - loss_of(shifted[1])) / (2 * h)
        # the directional derivative along g / |g| is |g|
        np.testing.assert_allclose(numeric, norm, rtol=2e-2, err_msg=name)


def test_micro_batches_equal_one_batch(gradients):
    _, by_count = gradients
    assert_trees_close(by_count[4], by_count[1], atol=1e-5)  # summation order differs


def test_rematerialisation_and_kept_logits_change_no_gradient(gradients):
    _, by_count = gradients
    assert_trees_close(by_count["remat"], by_count[1], atol=1e-6)


def test_head_on_trained_tokens_only_changes_no_gradient(gradients):
    _, by_count = gradients
    assert_trees_close(by_count["trained"], by_count[4], atol=1e-6)


def test_head_positions_buckets_the_most_trained_tokens_of_a_row():
    def batch_of(loss_mask):
        zeros = np.zeros(loss_mask.shape, np.float32)
        return TrainBatch(Batch(np.ones(loss_mask.shape, np.int32), loss_mask,
                                loss_mask.astype(np.int32) - 1, np.zeros(3, np.int32),
                                np.zeros(3, np.float32), np.ones((3, 1), bool)), zeros, zeros)

    loss_mask = np.zeros((3, 32), bool)
    loss_mask[0, 1:10] = True  # 9 trained tokens: the longest row
    loss_mask[1, 20:25] = True
    batch = batch_of(loss_mask)
    assert head_positions(batch, buckets=4) == 16  # 9 rounded up to a multiple of 32 / 4
    assert head_positions(batch, buckets=8) == 12
    assert head_positions(batch, buckets=1) is None
    dropped = np.zeros_like(loss_mask)
    dropped[0, 1:3] = True  # SPO's mask leaves 7 trained tokens in row 0
    assert head_positions(dataclasses.replace(batch, dropped=dropped), buckets=8) == 8
    full = loss_mask.copy()
    full[2, 1:] = True  # a row trained on every token after the first
    assert head_positions(batch_of(full), buckets=4) is None


@pytest.mark.parametrize("mesh, head_per_device", [(MeshConfig(fsdp=4, model=2), False),
                                                   (MeshConfig(data=2, fsdp=2, model=2), True)],
                         ids=["fsdp4-model2", "data2-fsdp2-model2-head-per-device"])
def test_sharded_step_equals_single_device(batches, reference_run, mesh, head_per_device):
    if jax.device_count() < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8")
    learner = Learner(CFG, dataclasses.replace(FP32, head_per_device=head_per_device),
                      mesh=build_mesh(mesh))
    state = learner.init(init_params())
    gate = state.params["layers"]["gate"]  # [layers, d, f]: d over fsdp, f over model
    assert gate.addressable_shards[0].data.shape == (2, 32 // mesh.fsdp, 32)
    mu = state.opt_state[1][0].mu["layers"]["gate"]
    assert mu.sharding == gate.sharding  # optimizer moments are sharded like their params
    state, history = run(learner, batches)
    expected_state, expected_history = reference_run
    assert_trees_close(history, expected_history, atol=2e-5)
    # Adam divides by sqrt(v): a different reduction order in a near-zero gradient can move
    # one weight by a few 1e-5 (one update moves it by up to lr = 3e-3)
    assert_trees_close(state.params, expected_state.params, atol=1e-4)


def test_metrics_and_schedule(reference_run, batches):
    _, history = reference_run
    lr = schedule(FP32.optimizer)
    for step, metrics in enumerate(history):
        assert set(metrics) == {"loss", "policy_loss", "kl_loss", "kl", "entropy",
                                "clip_fraction", "behaviour_gap", "behaviour_kl", "grad_norm",
                                "lr"}
        np.testing.assert_allclose(metrics["lr"], lr(step), rtol=1e-6)
        np.testing.assert_allclose(metrics["loss"], metrics["policy_loss"]
                                   + FP32.loss.kl_coef * metrics["kl_loss"], rtol=1e-5)
        assert 0 < metrics["clip_fraction"] < 1 and metrics["grad_norm"] > 0
        assert 0 < metrics["entropy"] <= np.log(CFG.vocab_size)
    mask = decay_mask(CFG)
    assert mask["layers"]["gate"] and mask["embed"] and mask["attn"]["q"]
    assert not mask["layers"]["attn_norm"] and not mask["attn"]["q_norm"] and not mask["norm"]


def test_training_raises_logprobs_of_advantaged_tokens(single, batches):
    batch = batches[0]
    positive = batch.batch.loss_mask & (batch.advantages > 0)
    state = single.init(init_params())
    before = np.asarray(single.logprobs(state.params, batch.batch.tokens))
    for _ in range(3):
        state, _ = single.train_step(state, batch)
    after = np.asarray(single.logprobs(state.params, batch.batch.tokens))
    assert (after - before)[positive].mean() > 0 > (after - before)[batch.advantages < 0].mean()


def test_each_credit_parts_gradient_norm_is_its_advantages_policy_gradient(single, batches):
    """Against the train step's own gradient (one micro-batch, no KL) with the batch's
    advantages replaced by the part's: a part of zeros has none, a scaled part a scaled one."""
    batch = batches[0]
    params = single.init(init_params()).params
    noise = np.random.default_rng(5).normal(0, 1, batch.advantages.shape).astype(np.float32)
    parts = [batch.advantages, noise * batch.batch.loss_mask, 0 * noise, 3 * batch.advantages]
    learner = Learner(CFG, dataclasses.replace(FP32, micro_batches=4))
    norms = np.asarray(learner.part_gradient_norms(params, batch, np.stack(parts, axis=1)))
    policy_only = dataclasses.replace(FP32, loss=dataclasses.replace(FP32.loss, kl_coef=0.0))
    compute = jax.jit(functools.partial(batch_gradients, model_cfg=CFG, cfg=policy_only,
                                        mesh=single.mesh,
                                        shardings=single.state_shardings.params))
    for part, norm in zip(parts, norms):
        grads, _ = compute(params, dataclasses.replace(batch, advantages=part))
        expected = np.sqrt(sum(np.sum(np.square(g)) for g in jax.tree.leaves(grads)))
        np.testing.assert_allclose(norm, expected, rtol=1e-4, atol=1e-9)
    assert norms[2] == 0 and norms[0] > 0
    np.testing.assert_allclose(norms[3], 3 * norms[0], rtol=1e-5)
    with pytest.raises(ValueError, match="parts"):
        learner.part_gradient_norms(params, batch, np.stack(parts, axis=1)[:, :, 1:])


def test_bf16_compute_with_float32_master_weights(single, batches):
    learner = Learner(CFG, dataclasses.replace(FP32, compute_dtype="bfloat16"))
    state = learner.init(init_params())
    # the step's program (traced, not compiled): matmuls in bf16, state and metrics float32
    jaxpr = jax.make_jaxpr(learner.train_step)(state, batches[0])
    assert "bf16[32,128]" in str(jaxpr) and "bf16[8,32,64]" in str(jaxpr)  # LM head, MLP
    out_state, metrics = jax.eval_shape(learner.train_step, state, batches[0])
    dtypes = {x.dtype for x in jax.tree.leaves((out_state.params, out_state.opt_state,
                                                metrics)) if x.ndim > 0 or x.dtype.kind == "f"}
    assert dtypes == {np.dtype(np.float32)}
    tokens = batches[0].batch.tokens
    low = np.asarray(learner.logprobs(state.params, tokens))
    high = np.asarray(single.logprobs(state.params, tokens))
    np.testing.assert_allclose(low, high, atol=0.1)
    assert np.abs(low - high).max() > 0  # it did compute in bf16


def test_bad_inputs_are_value_errors(single, batches):
    batch = batches[0]
    state = single.init(init_params())
    with pytest.raises(ValueError, match="ref_logprobs: required"):
        single.train_step(state, dataclasses.replace(batch, ref_logprobs=None))
    with pytest.raises(ValueError, match="advantages"):
        single.train_step(state, dataclasses.replace(batch, advantages=batch.advantages[:, :-1]))
    uneven = jax.tree.map(lambda x: x[:6], batch)
    with pytest.raises(ValueError, match="micro_batches=4"):
        Learner(CFG, dataclasses.replace(FP32, micro_batches=4)).train_step(
            Learner(CFG, dataclasses.replace(FP32, micro_batches=4)).init(init_params()), uneven)
    outside = batch.batch.tokens.copy()
    outside[1, 3] = CFG.vocab_size
    with pytest.raises(ValueError, match=rf"batch.tokens: token ids span \[0, {CFG.vocab_size}\]"):
        single.train_step(state, dataclasses.replace(
            batch, batch=dataclasses.replace(batch.batch, tokens=outside)))
    with pytest.raises(ValueError, match="tokens: token ids span"):
        single.logprobs(state.params, outside)
    validate_train_batch(batch, FP32)
    first = dataclasses.replace(batch, batch=dataclasses.replace(
        batch.batch, loss_mask=batch.batch.loss_mask.copy(), turn_ids=batch.batch.turn_ids.copy()))
    first.batch.loss_mask[0, 0] = True
    first.batch.turn_ids[0, 0] = 0
    with pytest.raises(ValueError, match="column 0"):
        validate_train_batch(first, FP32)
    nan = batch.advantages.copy()
    nan[batch.batch.loss_mask] = np.nan
    with pytest.raises(ValueError, match="advantages: NaN"):
        validate_train_batch(dataclasses.replace(batch, advantages=nan), FP32)


def compiled_peak_bytes(cfg, mesh, rows: int, length: int) -> int:
    """XLA's per-device peak of the compiled train step (arguments + outputs - donated +
    temporaries), for abstract inputs."""
    config = dataclasses.replace(FP32, head_buckets=1, loss=LossConfig(kl_coef=0.0))
    learner = Learner(cfg, config, mesh)
    grid = (rows, length)

    def spec(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    batch = Batch(spec(grid, np.int32), spec(grid, np.bool_), spec(grid, np.int32),
                  spec(grid[:1], np.int32), spec(grid[:1], np.float32), spec((rows, 1), np.bool_))
    train = TrainBatch(batch, spec(grid, np.float32), spec(grid, np.float32))
    stats = learner.compiled_step().lower(learner.abstract_state(), train).compile() \
        .memory_analysis()
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            - stats.alias_size_in_bytes + stats.temp_size_in_bytes)


def test_fsdp_splits_the_rows_not_the_width():
    """Under FSDP every device computes its own rows with gathered weights: its peak is a small
    share of one device's. (Without the hidden states' row constraint XLA split the matmuls'
    width instead and every device ran the whole batch: half of one device's peak.)"""
    if jax.device_count() < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8")
    cfg = qwen.QwenConfig(model_type="qwen3", vocab_size=4096, hidden_size=256,
                          intermediate_size=768, num_layers=4, num_heads=4, num_kv_heads=2,
                          head_dim=64, qk_norm=True)
    single = compiled_peak_bytes(cfg, build_mesh(MeshConfig()), 8, 256)
    fsdp = compiled_peak_bytes(cfg, build_mesh(MeshConfig(fsdp=8)), 8, 256)
    assert fsdp < 0.3 * single


@pytest.mark.parametrize("correction", ["tis", "mis"])
def test_a_bf16_samplers_mismatch_is_corrected_and_measured(single, batches, correction):
    """The behaviour policy's log-probs from a bfloat16 forward (a bf16 sampler's), the learner
    in float32: over two micro-batches, the step's importance metrics are the numpy oracle's of
    w = learner / behaviour on the trained tokens, the largest weight the batch's largest."""
    bf16 = Learner(CFG, dataclasses.replace(FP32, compute_dtype="bfloat16"))
    params = init_params()
    tokens = batches[0].batch.tokens
    behaviour = np.asarray(bf16.logprobs(params, tokens))
    proximal = np.asarray(single.logprobs(params, tokens))
    batch = dataclasses.replace(batches[0], old_logprobs=behaviour)
    cap = 1.01
    learner = Learner(CFG, dataclasses.replace(
        FP32, micro_batches=2,
        loss=dataclasses.replace(FP32.loss, is_correction=correction, is_cap=cap)))
    _, metrics = learner.train_step(learner.init(params), batch)
    mask = batch.batch.loss_mask & ~batch.dropped
    mask[:, 0] = False
    w = np.exp(proximal - behaviour)[mask].astype(np.float64)
    if correction == "tis":
        weight, truncated = np.minimum(w, cap), w > cap
    else:
        truncated = (w < 1 / cap) | (w > cap)
        weight = np.where(truncated, 0.0, w)
    assert 0 < truncated.mean() < 1  # bf16 moves some tokens' log-probs by more than log 1.01
    np.testing.assert_allclose(float(metrics["is_weight"]), weight.mean(), rtol=1e-4)
    np.testing.assert_allclose(float(metrics["is_truncated"]), truncated.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["is_weight_max"]), weight.max(), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["behaviour_gap"]),
                               np.abs(np.log(w)).mean(), rtol=1e-4)
