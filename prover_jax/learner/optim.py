"""The optimizer: AdamW with global-norm clipping and a warmup-then-decay schedule.

Weight decay applies to matrices only: a parameter decays when it has at least two logical axes
besides the stacked `layers` axis (so embeddings and projections decay; norms, biases, DeltaNet
gates do not), read from `models.qwen.params.describe`.
"""

from __future__ import annotations

import jax
import optax

from models.qwen.config import QwenConfig
from models.qwen.params import ArrayInfo, describe
from prover_jax.learner.config import OptimizerConfig


def schedule(cfg: OptimizerConfig) -> optax.Schedule:
    """Learning rate as a function of the update count: linear warmup from 0, then decay."""
    peak, warmup = cfg.learning_rate, cfg.warmup_steps
    final = peak * cfg.final_lr_fraction
    if cfg.decay == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, peak, warmup, cfg.total_steps, final)
    after = (optax.constant_schedule(peak) if cfg.decay == "constant"
             else optax.linear_schedule(peak, final, cfg.total_steps - warmup))
    if warmup == 0:
        return after
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])


def decay_mask(model_cfg: QwenConfig):
    """Params-shaped pytree of bools: which parameters get weight decay."""
    def is_matrix(info: ArrayInfo) -> bool:
        return sum(axis != "layers" for axis in info.axes) >= 2

    return jax.tree.map(is_matrix, describe(model_cfg),
                        is_leaf=lambda x: isinstance(x, ArrayInfo))


def make_optimizer(cfg: OptimizerConfig,
                   model_cfg: QwenConfig) -> optax.GradientTransformationExtraArgs:
    """Global-norm clipping (when `cfg.max_grad_norm` is set) followed by AdamW."""
    adamw = optax.adamw(schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                        weight_decay=cfg.weight_decay, mask=decay_mask(model_cfg))
    if cfg.max_grad_norm is None:
        return adamw
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)
