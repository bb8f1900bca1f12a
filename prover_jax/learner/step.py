"""The sharded train step and the log-probability function of the learner.

One step: per-token weights from the whole batch (`loss.loss_weights`), the batch split into
micro-batches, gradients accumulated over them in `lax.scan`, then global-norm clipping and
AdamW. Master weights, gradients and optimizer state are float32; the forward and backward pass
run in `LearnerConfig.compute_dtype` (a cast of the params inside the differentiated function,
so gradients arrive in float32). Logits and the loss are float32 whatever the compute dtype.
The LM head runs on the trained tokens only, gathered into a bucketed number of slots per row
(`head_positions`); the log-probability function runs it on every token.

Sharding, on a `tpu.mesh` mesh. Params and optimizer moments follow `tpu.mesh.LEARNER_RULES`
(FSDP: the model width over "fsdp"; heads, MLP and vocab over "model", which is tensor
parallelism when the mesh has a "model" axis > 1; replicated over "data"); every batch array is
split along rows over "data" and "fsdp". A micro-batch takes every n-th row
(`split_micro_batches`), so each one stays spread over all batch shards.

Positions are `0..L-1` on every row: rows are left-aligned and attention is causal, so right
padding never changes the logits of the real tokens before it.

Glossary: b rows, l tokens, n micro-batches.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from models.qwen.config import QwenConfig
from models.qwen.model import check_token_ids, forward, lm_head
from models.qwen.params import abstract
from models.qwen.sharding import Rules, param_shardings
from prover_jax.batch import Batch, validate
from prover_jax.checks import check_arrays
from prover_jax.learner import loss as losses
from prover_jax.learner.config import LearnerConfig
from prover_jax.learner.optim import make_optimizer, schedule
from tpu.mesh import (
    LEARNER_RULES,
    batch_shards,
    build_mesh,
    check_mesh,
    row_sharding,
)

KEY_DATA_SHAPE = (2,)  # a threefry key's data
METRICS = ("loss", "policy_loss", "kl_loss", "kl", "entropy", "clip_fraction", "behaviour_gap",
           "behaviour_kl")
IS_METRICS = ("is_weight", "is_truncated", "is_weight_max")  # with an importance correction
MAX_METRICS = frozenset({"is_weight_max"})  # the batch's is the micro-batches' largest


def metric_names(cfg: LearnerConfig) -> tuple[str, ...]:
    """The metrics of `loss.weighted_loss` under `cfg`."""
    return METRICS + (IS_METRICS if cfg.loss.is_correction != "none" else ())


@dataclasses.dataclass(frozen=True)
class TrainBatch:
    """One batch for the learner: the padded `Batch` plus the per-token inputs of the loss.

    Every array has B rows; per-token arrays are float32 / bool [B, L] on the grid of
    `batch.tokens` (value at u scores token u; see `prover_jax.learner.loss`).

    Attributes:
      batch: the padded Batch (tokens, loss_mask, ...).
      advantages: float32 [B, L] per-token advantages (`credit.to_tokens` or a kernel).
      old_logprobs: float32 [B, L] log-probabilities under the policy that sampled the batch.
      ref_logprobs: float32 [B, L] under the reference policy, or None (needed when kl_coef > 0).
      dropped: bool [B, L] tokens left out of the loss (the credit method's `dropped_tokens`, e.g.
        SPO's `credit.high_prob_mask`), or
        None.
    """

    batch: Batch
    advantages: jax.Array
    old_logprobs: jax.Array
    ref_logprobs: jax.Array | None = None
    dropped: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class TrainState:
    """Everything a step updates or a checkpoint must restore.

    Attributes:
      params: float32 params pytree (`models.qwen.params.describe`).
      opt_state: the optax state.
      step: int32 [] updates applied so far.
      rng: uint32 [2] key data (`jax.random.key_data`) for the trainer's sampling; the step
        carries it unchanged.
      data_position: int32 [] how much of its data stream the trainer has consumed.
    """

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array
    data_position: jax.Array


for _cls in (TrainBatch, TrainState):
    jax.tree_util.register_dataclass(
        _cls, data_fields=[f.name for f in dataclasses.fields(_cls)], meta_fields=[])


def check_train_batch(batch: TrainBatch) -> None:
    """Trace-time shape and dtype checks of a TrainBatch; ValueError names the array."""
    specs = {"batch.tokens": (batch.batch.tokens, "b l", "i"),
             "batch.loss_mask": (batch.batch.loss_mask, "b l", "b"),
             "advantages": (batch.advantages, "b l", "f"),
             "old_logprobs": (batch.old_logprobs, "b l", "f")}
    if batch.ref_logprobs is not None:
        specs["ref_logprobs"] = (batch.ref_logprobs, "b l", "f")
    if batch.dropped is not None:
        specs["dropped"] = (batch.dropped, "b l", "b")
    check_arrays(specs)


def validate_train_batch(batch: TrainBatch, cfg: LearnerConfig) -> None:
    """Host-side checks of a TrainBatch from any source; a ValueError names the array at fault.

    `prover_jax.batch.validate` on `batch.batch`, the shapes of `check_train_batch`, finite
    advantages and log-probabilities on policy tokens, and no policy token in column 0 (nothing
    predicts it). Reads the arrays back to the host: call it on batches you did not build.
    """
    validate(batch.batch)
    check_train_batch(batch)
    if cfg.loss.kl_coef > 0 and batch.ref_logprobs is None:
        raise ValueError(f"ref_logprobs: required when kl_coef={cfg.loss.kl_coef} > 0")
    loss_mask = np.asarray(batch.batch.loss_mask)
    if loss_mask[:, 0].any():
        raise ValueError("loss_mask: policy tokens in column 0 of rows "
                         f"{np.flatnonzero(loss_mask[:, 0])[:8].tolist()}; nothing predicts the "
                         "first token, so a conversation must open with a prompt")
    for name in ("advantages", "old_logprobs", "ref_logprobs"):
        values = getattr(batch, name)
        if values is None:
            continue
        bad = loss_mask & ~np.isfinite(np.asarray(values))
        if bad.any():
            raise ValueError(f"{name}: NaN or inf on policy tokens of rows "
                             f"{np.flatnonzero(bad.any(1))[:8].tolist()}")


def check_rows(rows: int, micro_batches: int, mesh: Mesh) -> None:
    """Raises a ValueError unless B rows split evenly into micro-batches and batch shards."""
    shards = batch_shards(mesh)
    if rows % (micro_batches * shards):
        raise ValueError(f"batch: {rows} rows do not split into micro_batches={micro_batches} "
                         f"x batch shards={shards}; pack with "
                         f"row_multiple={micro_batches * shards}")


class MicroBatches(NamedTuple):
    """The arrays one micro-batch's loss reads, stacked over micro-batches: [N, B / N, L]."""

    tokens: jax.Array
    mask: jax.Array
    weights: losses.Weights
    old_logprobs: jax.Array
    advantages: jax.Array
    ref_logprobs: jax.Array | None


def split_micro_batches(tree, count: int, mesh: Mesh):
    """Splits every [B, ...] leaf into [count, B / count, ...]; micro-batch i holds rows
    i, i + count, ... so that each stays spread over the batch shards."""
    sharding = row_sharding(mesh, leading=1)

    def split(x):
        x = x.reshape(x.shape[0] // count, count, *x.shape[1:]).swapaxes(0, 1)
        return jax.lax.with_sharding_constraint(x, sharding)

    return jax.tree.map(split, tree)


def merge_micro_batches(x: jax.Array) -> jax.Array:
    """Inverse of `split_micro_batches` for one [N, B / N, ...] array."""
    return x.swapaxes(0, 1).reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def model_logprobs(params, model_cfg: QwenConfig, tokens: jax.Array, cfg: LearnerConfig,
                   needed: jax.Array | None = None, head_positions: int | None = None,
                   mesh: Mesh | None = None) -> tuple[jax.Array, jax.Array]:
    """Log-probability and entropy of every token under `params` (`loss.head_logprobs`).

    Args:
      params: float32 params; cast to `cfg.compute_dtype` for the forward pass.
      model_cfg: QwenConfig.
      tokens: int32 [B, L], left-aligned rows.
      cfg: LearnerConfig (compute dtype, rematerialisation, `logits_chunk`,
        `recompute_logits`).
      needed, head_positions: only the tokens of bool [B, L] `needed`, at most
        `head_positions` per row, go through the LM head (None: every token).
      mesh: the device mesh the hidden states keep their rows split over, and with
        `cfg.head_per_device` the LM head runs on each device's rows (None: wherever XLA puts
        them).

    Returns:
      (logprobs, entropy), float32 [B, L] (0 on tokens not `needed`).
    """
    compute = jax.tree.map(lambda p: p.astype(cfg.compute_dtype), params)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    hidden, _ = forward(compute, model_cfg, tokens, positions, remat=cfg.remat,
                        hidden_only=True,
                        activation_sharding=None if mesh is None else row_sharding(mesh))
    return losses.head_logprobs(hidden, lm_head(compute, model_cfg), tokens, cfg.logits_chunk,
                                cfg.recompute_logits, needed, head_positions,
                                mesh if cfg.head_per_device else None)


def micro_batch_loss(params, micro: MicroBatches, model_cfg: QwenConfig, cfg: LearnerConfig,
                     head_positions: int | None, mesh: Mesh | None = None
                     ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The loss sum of one micro-batch (weights from the whole batch) and its metric sums; the
    LM head runs on the trained tokens only when `head_positions` is given."""
    needed = None if head_positions is None else micro.mask
    logprobs, entropy = model_logprobs(params, model_cfg, micro.tokens, cfg, needed,
                                       head_positions, mesh)
    metrics = losses.weighted_loss(logprobs, entropy, micro.old_logprobs, micro.advantages,
                                   micro.mask, micro.weights, cfg.loss, micro.ref_logprobs)
    return metrics["loss"], metrics


def accumulate_gradients(params, micro: MicroBatches, model_cfg: QwenConfig, cfg: LearnerConfig,
                         shardings, head_positions: int | None = None, mesh: Mesh | None = None
                         ) -> tuple[Any, dict[str, jax.Array]]:
    """Sums gradients and metrics over the micro-batches in `lax.scan`.

    Args:
      params: float32 params.
      micro: MicroBatches, leaves [N, B / N, ...].
      model_cfg, cfg: configs.
      shardings: params-shaped NamedShardings the gradients are kept in.
      head_positions: see `batch_gradients`.
      mesh: see `model_logprobs`.

    Returns:
      (float32 gradient pytree, {metric: float32 scalar}) of the whole batch.
    """
    grad_fn = jax.grad(micro_batch_loss, has_aux=True)

    def add(total, part):
        return jax.tree.map(jnp.add, total, part)

    def combine(total, part):
        return {name: (jnp.maximum if name in MAX_METRICS else jnp.add)(total[name], part[name])
                for name in total}

    def body(carry, one):
        grads, metrics = grad_fn(params, one, model_cfg, cfg, head_positions, mesh)
        grads = jax.lax.with_sharding_constraint(grads, shardings)
        return (add(carry[0], grads), combine(carry[1], metrics)), None

    zeros = jax.lax.with_sharding_constraint(jax.tree.map(jnp.zeros_like, params), shardings)
    init = (zeros, {name: jnp.zeros((), jnp.float32) for name in metric_names(cfg)})
    (grads, metrics), _ = jax.lax.scan(body, init, micro)
    return grads, metrics


def batch_gradients(params, batch: TrainBatch, *, model_cfg: QwenConfig, cfg: LearnerConfig,
                    mesh: Mesh, shardings, head_positions: int | None = None
                    ) -> tuple[Any, dict[str, jax.Array]]:
    """Gradient of the whole batch's loss, accumulated over `cfg.micro_batches` micro-batches.

    Args:
      params: float32 params.
      batch: TrainBatch of B rows, B a multiple of `cfg.micro_batches` x the batch shards
        (`tpu.mesh.batch_shards`).
      model_cfg, cfg: configs (static).
      mesh: the device mesh.
      shardings: params-shaped NamedShardings of the params.
      head_positions: None runs the LM head on every token; an int at least the most trained
        tokens of any row (`head_positions`) runs it on the trained tokens only.

    Returns:
      (float32 gradients shaped like params, float32 scalar metrics of `loss.weighted_loss`).
    """
    check_train_batch(batch)
    check_rows(batch.batch.num_rows, cfg.micro_batches, mesh)
    loss_mask = batch.batch.loss_mask
    mask = losses.trained_tokens(loss_mask, batch.dropped)
    micro = split_micro_batches(
        MicroBatches(batch.batch.tokens, mask, losses.loss_weights(mask, loss_mask, cfg.loss),
                     batch.old_logprobs, batch.advantages, batch.ref_logprobs),
        cfg.micro_batches, mesh)
    return accumulate_gradients(params, micro, model_cfg, cfg, shardings, head_positions, mesh)


def train_step(state: TrainState, batch: TrainBatch, *, model_cfg: QwenConfig,
               cfg: LearnerConfig, optimizer: optax.GradientTransformation, mesh: Mesh,
               shardings, head_positions: int | None = None
               ) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer update on one batch (wrap with `jax.jit`; `Learner` does).

    Args:
      state: TrainState with float32 params.
      batch: TrainBatch of B rows, B a multiple of `cfg.micro_batches` x the batch shards
        (`tpu.mesh.batch_shards`).
      model_cfg, cfg: configs (static).
      optimizer: `optim.make_optimizer(cfg.optimizer, model_cfg)`.
      mesh: the device mesh.
      shardings: params-shaped NamedShardings of the params.
      head_positions: see `batch_gradients`.

    Returns:
      (the next TrainState, float32 scalar metrics: loss, policy_loss, kl_loss, kl, entropy,
      clip_fraction, behaviour_gap and behaviour_kl (the sampler-vs-learner log-prob mismatch
      of `loss.token_terms`), with an importance correction (`LossConfig.is_correction`)
      is_weight, is_truncated and is_weight_max, grad_norm (before clipping), lr (of this
      update)).
    """
    grads, metrics = batch_gradients(state.params, batch, model_cfg=model_cfg, cfg=cfg,
                                     mesh=mesh, shardings=shardings,
                                     head_positions=head_positions)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics.update(grad_norm=optax.tree.norm(grads),
                   lr=jnp.asarray(schedule(cfg.optimizer)(state.step), jnp.float32))
    return dataclasses.replace(state, params=params, opt_state=opt_state,
                               step=state.step + 1), metrics


def part_gradient_norms(params, batch: TrainBatch, parts: jax.Array, *, model_cfg: QwenConfig,
                        cfg: LearnerConfig, mesh: Mesh, shardings) -> jax.Array:
    """The norm of the policy gradient each credit part's advantages give, on one batch.

    Part p's gradient is that of the policy loss (`loss.token_terms`' PPO-clip term under
    `cfg.loss`, weighted as the loss weights it; no KL) with the batch's advantages replaced by
    part p's. Where no token is clipped the loss is linear in the advantages, so the parts'
    gradients add up to the whole advantage's. The forward pass runs once per micro-batch and
    the backward pass once per part (`jax.vjp`, the parts batched).

    Args:
      params: float32 params.
      batch: TrainBatch of B rows (its `advantages` are not read).
      parts: float [B, P, L] each part's advantages on the token grid (rows first, so they
        split over the batch axes as the batch does).
      model_cfg, cfg, mesh: as `batch_gradients`.
      shardings: params-shaped NamedShardings of the params.

    Returns:
      float32 [P], the global norm of each part's gradient.
    """
    check_train_batch(batch)
    check_arrays({"batch.tokens": (batch.batch.tokens, "b l", "i"),
                  "parts": (parts, "b p l", "f")})
    check_rows(batch.batch.num_rows, cfg.micro_batches, mesh)
    loss_mask = batch.batch.loss_mask
    mask = losses.trained_tokens(loss_mask, batch.dropped)
    weights = losses.loss_weights(mask, loss_mask, cfg.loss).loss
    micro = split_micro_batches((batch.batch.tokens, mask, weights, batch.old_logprobs, parts),
                                cfg.micro_batches, mesh)
    stacked = jax.tree.map(
        lambda s: NamedSharding(s.mesh, PartitionSpec(None, *s.spec)), shardings)

    def policy_loss_of(logprobs, advantages, mask, weights, old):
        terms = losses.token_terms(logprobs, old, advantages, mask, cfg.loss)
        return jnp.sum(weights * terms["policy"])

    def body(total, one):
        tokens, mask, weights, old, advantages = one
        logprobs, pullback = jax.vjp(
            lambda p: model_logprobs(p, model_cfg, tokens, cfg, mesh=mesh)[0], params)
        cotangents = jax.vmap(jax.grad(policy_loss_of), in_axes=(None, 1, None, None, None))(
            logprobs, advantages, mask, weights, old)
        grads = jax.lax.with_sharding_constraint(jax.vmap(pullback)(cotangents)[0], stacked)
        return jax.tree.map(jnp.add, total, grads), None

    count = parts.shape[1]
    zeros = jax.tree.map(lambda p: jnp.zeros((count, *p.shape), jnp.float32), params)
    grads, _ = jax.lax.scan(body, jax.lax.with_sharding_constraint(zeros, stacked), micro)
    squares = [jnp.sum(jnp.square(g).reshape(count, -1), axis=1) for g in jax.tree.leaves(grads)]
    return jnp.sqrt(sum(squares))


def policy_logprobs(params, tokens: jax.Array, *, model_cfg: QwenConfig, cfg: LearnerConfig,
                    mesh: Mesh) -> jax.Array:
    """Log-probabilities of a batch's tokens under `params`, e.g. the old or reference policy.

    Runs micro-batch by micro-batch (`lax.map`), in `cfg.compute_dtype`, so its peak memory is
    the train step's forward pass.

    Args:
      params: float32 params.
      tokens: int32 [B, L], B a multiple of `cfg.micro_batches` x the batch shards
        (`tpu.mesh.batch_shards`).
      model_cfg, cfg: configs (static).
      mesh: the device mesh.

    Returns:
      float32 [B, L] on the grid of `tokens`: value at u is log p(tokens[u] | tokens[:u]);
      column 0 is 0.
    """
    check_arrays({"tokens": (tokens, "b l", "i")})
    check_rows(tokens.shape[0], cfg.micro_batches, mesh)
    micro = split_micro_batches(tokens, cfg.micro_batches, mesh)
    logprobs = jax.lax.map(
        lambda t: model_logprobs(params, model_cfg, t, cfg, mesh=mesh)[0], micro)
    return merge_micro_batches(logprobs)


def fresh_state(params, rng: jax.Array, optimizer: optax.GradientTransformation) -> TrainState:
    """Step 0: `params` cast to float32, zero optimizer moments, data position 0.

    Args:
      params: params pytree.
      rng: uint32 key data (`jax.random.key_data`).
      optimizer: the optax transformation.
    """
    params = jax.tree.map(lambda p: p.astype(jnp.float32), params)
    return TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32), rng,
                      jnp.zeros((), jnp.int32))


class _Compiled(NamedTuple):
    optimizer: optax.GradientTransformation
    param_shardings: Any
    state_shardings: TrainState
    train_step: Any  # head_positions -> the jitted step
    logprobs: Any
    part_gradient_norms: Any
    fresh_state: Any


@functools.lru_cache(maxsize=16)
def _compile(model_cfg: QwenConfig, cfg: LearnerConfig, mesh: Mesh,
             rules: tuple[tuple[str, str | None], ...]) -> _Compiled:
    """The jitted functions of one setup, shared by every Learner of that setup (so building a
    second Learner does not compile again)."""
    optimizer = make_optimizer(cfg.optimizer, model_cfg)
    params = param_shardings(model_cfg, mesh, dict(rules))
    replicated = NamedSharding(mesh, PartitionSpec())
    batch = row_sharding(mesh)
    abstract_opt = jax.eval_shape(optimizer.init, abstract(model_cfg))
    opt = optax.tree_map_params(optimizer, lambda _, s: s, abstract_opt, params,
                                transform_non_params=lambda _: replicated)
    state = TrainState(params, opt, replicated, replicated, replicated)
    common = dict(model_cfg=model_cfg, cfg=cfg, mesh=mesh)

    @functools.cache
    def step(head_positions: int | None):
        return jax.jit(functools.partial(train_step, optimizer=optimizer, shardings=params,
                                         head_positions=head_positions, **common),
                       in_shardings=(state, batch), out_shardings=(state, replicated),
                       donate_argnums=0)

    logprobs = jax.jit(functools.partial(policy_logprobs, **common),
                       in_shardings=(params, batch), out_shardings=batch)
    part_norms = jax.jit(functools.partial(part_gradient_norms, shardings=params, **common),
                         in_shardings=(params, batch, batch), out_shardings=replicated)
    fresh = jax.jit(functools.partial(fresh_state, optimizer=optimizer), out_shardings=state)
    return _Compiled(optimizer, params, state, step, logprobs, part_norms, fresh)


@jax.jit
def _most_trained(loss_mask: jax.Array, dropped: jax.Array | None) -> jax.Array:
    return jnp.max(jnp.sum(losses.trained_tokens(loss_mask, dropped), axis=1))


def head_positions(batch: TrainBatch, buckets: int) -> int | None:
    """Slots per row for the LM head of a train step on `batch` (`batch_gradients`).

    The most trained tokens of any row, rounded up to a multiple of ceil(L / buckets), so a run
    compiles at most `buckets` steps per batch shape. None (every token) when that reaches L,
    when `buckets` is 1, or when the mask is abstract (the step is being traced).
    """
    loss_mask = batch.batch.loss_mask
    if buckets == 1 or isinstance(loss_mask, jax.core.Tracer):
        return None
    length = loss_mask.shape[1]
    bucket = -(-length // buckets)
    slots = max(1, -(-int(_most_trained(loss_mask, batch.dropped)) // bucket)) * bucket
    return None if slots >= length else slots


class Learner:
    """A model, a LearnerConfig and a mesh, with the compiled step and log-probability functions.

    Attributes:
      optimizer: the optax transformation.
      mesh: the mesh (one device when none is given).
      state_shardings: TrainState of NamedShardings.
    """

    def __init__(self, model_cfg: QwenConfig, cfg: LearnerConfig | None = None,
                 mesh: Mesh | None = None, rules: Rules = LEARNER_RULES):
        self.model_cfg = model_cfg
        self.cfg = cfg if cfg is not None else LearnerConfig()
        self.mesh = mesh if mesh is not None else build_mesh()
        check_mesh(self.mesh)
        compiled = _compile(model_cfg, self.cfg, self.mesh, tuple(sorted(rules.items())))
        self.optimizer = compiled.optimizer
        self.state_shardings = compiled.state_shardings
        self._train_step = compiled.train_step
        self._logprobs = compiled.logprobs
        self._part_gradient_norms = compiled.part_gradient_norms
        self._fresh_state = compiled.fresh_state

    def logprobs(self, params, tokens: jax.Array) -> jax.Array:
        """Jitted `policy_logprobs`: `(params, tokens [B, L]) -> float32 [B, L]`.

        Raises:
          ValueError: concrete token ids outside the model's vocabulary.
        """
        check_token_ids(tokens, self.model_cfg.vocab_size)
        return self._logprobs(params, tokens)

    def part_gradient_norms(self, params, batch: TrainBatch, parts: jax.Array) -> jax.Array:
        """Jitted `part_gradient_norms`: `(params, TrainBatch, parts [B, P, L]) -> float32 [P]`.

        Raises:
          ValueError: concrete token ids outside the model's vocabulary.
        """
        check_token_ids(batch.batch.tokens, self.model_cfg.vocab_size, "batch.tokens")
        return self._part_gradient_norms(params, batch, parts)

    def train_step(self, state: TrainState, batch: TrainBatch
                   ) -> tuple[TrainState, dict[str, jax.Array]]:
        """One jitted update (`train_step`): `(TrainState, TrainBatch) -> (TrainState, metrics)`.

        The state is donated (do not reuse the one passed in). The LM head runs on the trained
        tokens only, in `head_positions(batch, cfg.head_buckets)` slots per row: one compiled
        step per bucket.

        Raises:
          ValueError: concrete token ids outside the model's vocabulary.
        """
        check_token_ids(batch.batch.tokens, self.model_cfg.vocab_size, "batch.tokens")
        positions = head_positions(batch, self.cfg.head_buckets)
        return self._train_step(positions)(state, batch)

    def compiled_step(self, head_positions: int | None = None):
        """The jitted `train_step` with `head_positions` LM-head slots per row (None: every
        token), e.g. to `lower` it for abstract inputs and read XLA's memory analysis."""
        return self._train_step(head_positions)

    def init(self, params, rng: jax.Array | int = 0) -> TrainState:
        """A fresh TrainState: params cast to float32 and placed on the mesh, zero moments.

        Args:
          params: params pytree of `model_cfg` (any float dtype; e.g. `models.qwen.init`).
          rng: a typed PRNG key (`jax.random.key`) or an int seed; kept as key data.
        """
        key = jax.random.key(rng) if isinstance(rng, int) else rng
        return self._fresh_state(params, jax.random.key_data(key))

    def abstract_state(self) -> TrainState:
        """The TrainState as ShapeDtypeStructs with shardings (a restore target; no memory)."""
        rng = jax.ShapeDtypeStruct(KEY_DATA_SHAPE, jnp.uint32)
        state = jax.eval_shape(functools.partial(fresh_state, optimizer=self.optimizer),
                               abstract(self.model_cfg), rng)
        return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            state, self.state_shardings)
