"""Device meshes, and the rule tables that map the model's logical axes onto them.

A mesh has three named axes:
- "data": replicas. Batch rows are split over it; params and optimizer state are replicated.
- "fsdp": batch rows are split over it too, and params, gradients and optimizer state are
  sharded along the model width (fully sharded data parallelism).
- "model": tensor parallelism. Attention heads, MLP channels and the vocabulary are split.

Every parameter names its logical axes (`models.qwen.params.describe`); `LEARNER_RULES` and
`SAMPLER_RULES` say which mesh axis each logical axis goes to, and
`models.qwen.sharding.param_shardings` turns a table into one `NamedSharding` per parameter.
The learner keeps weights FSDP-sharded; the sampler keeps them replicated over the batch axes,
so a decode step never gathers weights. `to_sampler` moves weights from one layout to the other
on the devices.

This module imports only jax and the model: the learner builds its mesh from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from models.qwen.config import QwenConfig
from models.qwen.sharding import Rules, param_shardings
from tpu.mesh_config import AXES, BATCH_AXES, MeshConfig

LEARNER_RULES: Rules = {
    "layers": None, "vocab": "model", "embed": "fsdp", "q_heads": "model",
    "kv_heads": "model", "head_dim": None, "mlp": "model",
    "v_heads": "model", "v_dim": None, "conv_channels": None, "conv_kernel": None,
}
SAMPLER_RULES: Rules = {**LEARNER_RULES, "embed": None}


def build_mesh(config: MeshConfig = MeshConfig(), devices: Sequence | None = None) -> Mesh:
    """The ("data", "fsdp", "model") mesh of `config` over the first devices of `devices`
    (default: every device of every process), with automatic (propagated) sharding.

    Raises:
      ValueError: the sizes do not fit the device count (`MeshConfig.shape`), or, with several
        processes, leave devices out (every process must take part in every step).
    """
    devices = jax.devices() if devices is None else list(devices)
    shape = config.shape(len(devices))
    used = math.prod(shape.values())
    if jax.process_count() > 1 and used != len(devices):
        raise ValueError(f"mesh {config.describe()} uses {used} of the {len(devices)} devices "
                         f"of {jax.process_count()} processes; with several processes it must "
                         f"use them all (set one axis to -1)")
    return jax.make_mesh(tuple(shape[a] for a in AXES), AXES, devices=devices[:used],
                         axis_types=(AxisType.Auto,) * len(AXES))


def check_mesh(mesh: Mesh) -> None:
    """Raises a ValueError unless `mesh` has exactly the axes of `build_mesh`."""
    if tuple(mesh.axis_names) != AXES:
        raise ValueError(f"mesh: axes must be {AXES} (see tpu.mesh.build_mesh), got "
                         f"{tuple(mesh.axis_names)}")


def batch_shards(mesh: Mesh) -> int:
    """How many ways batch rows are split: the product of the batch axes' sizes."""
    return math.prod(mesh.shape[a] for a in BATCH_AXES)


def row_sharding(mesh: Mesh, leading: int = 0) -> NamedSharding:
    """Rows over the batch axes, after `leading` unsharded axes (1: [N, B, ...] micro-batches)."""
    return NamedSharding(mesh, PartitionSpec(*([None] * leading), BATCH_AXES))


def cache_shardings(cache, mesh: Mesh):
    """A `models.qwen.Cache`-shaped tree of NamedShardings for the sampler on `mesh`: rows over
    the batch axes and kv heads (Gated DeltaNet value heads) over "model", each where it divides
    evenly (else that dimension is replicated). `cache` may hold arrays or ShapeDtypeStructs,
    with keys and values stacked [n_full, B, K, S, E] or per layer [B, K, S, E]."""
    shards = batch_shards(mesh)

    def spec(x, row_axis: int, head_axis: int | None = None) -> NamedSharding:
        axes = [None] * len(x.shape)
        if x.shape[row_axis] % shards == 0:
            axes[row_axis] = BATCH_AXES
        if head_axis is not None and x.shape[head_axis] % mesh.shape["model"] == 0:
            axes[head_axis] = "model"
        return NamedSharding(mesh, PartitionSpec(*axes))

    def keys(x):
        stacked = len(x.shape) == 5
        return spec(x, int(stacked), 1 + int(stacked))

    per_layer = isinstance(cache.k, tuple)
    return cache._replace(
        k=tuple(map(keys, cache.k)) if per_layer else keys(cache.k),
        v=tuple(map(keys, cache.v)) if per_layer else keys(cache.v),
        valid=spec(cache.valid, 0), length=NamedSharding(mesh, PartitionSpec()),
        history=spec(cache.history, 1), state=spec(cache.state, 1, 2))


def to_sampler(params, cfg: QwenConfig, mesh: Mesh, dtype=None):
    """The params pytree resharded to `SAMPLER_RULES` on `mesh`, device to device (no host
    copy): weights replicated over the batch axes, split over "model"; cast to `dtype` (None:
    as they are) on the way.

    With several processes every process samples its own rollouts, so it gets its own copy:
    the params come back as single-device arrays on its first device, taken from its shards of
    the resharded params.

    Raises:
      ValueError: several processes and a "model" axis > 1 (a process would hold only its
        slice of the weights).
    """
    shardings = param_shardings(cfg, mesh, SAMPLER_RULES)
    if dtype is not None:
        params = jax.tree.map(lambda p: p.astype(dtype), params)
    if jax.process_count() == 1:
        return jax.device_put(params, shardings)  # no copy of what is already in place
    if mesh.shape["model"] > 1:
        raise ValueError(f"mesh: with {jax.process_count()} processes each process samples "
                         f"with a whole copy of the weights, so the model axis must be 1 "
                         f"(got {mesh.shape['model']})")
    resharded = jax.jit(lambda p: p, out_shardings=shardings)(params)  # a collective
    return jax.tree.map(lambda x: x.addressable_shards[0].data, resharded)


def from_process_local(mesh: Mesh, tree):
    """Global arrays, rows over the batch axes, from every process's own rows.

    Each process passes a pytree of its [B_local, ...] arrays (its share of the batch; every
    process the same shapes); the global arrays hold the processes' rows in process order.
    With one process this places the arrays over the mesh (B divisible by `batch_shards`).
    """
    sharding = row_sharding(mesh)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)
