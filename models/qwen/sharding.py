"""Logical -> physical sharding: a `Rules` table maps each logical axis to a mesh axis or None.

Every parameter names its logical axes (`params.describe`); the tables themselves (the
learner's FSDP layout and the sampler's tensor-parallel one) live with the mesh, in `tpu.mesh`.
`param_shardings` turns a table into a `NamedSharding` per parameter after two checks: no
parameter may map two of its axes to the same mesh axis (a collision), and a dimension that
does not divide evenly by its mesh axis is replicated instead (e.g. 2 kv heads on a 4-way model
axis), which `describe_placement` reports. `set_in_rows` writes each row's slots in a form
the partitioner splits with the rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from models.qwen.config import QwenConfig
from models.qwen.params import ArrayInfo, describe

Rules = Mapping[str, str | None]


def spec_for(name: str, info: ArrayInfo, rules: Rules, mesh: Mesh) -> PartitionSpec:
    """PartitionSpec of one parameter; raises ValueError on a mesh-axis collision."""
    unknown = [a for a in info.axes if a not in rules]
    if unknown:
        raise ValueError(f"{name}: logical axes {unknown} have no sharding rule")
    physical = []
    for size, axis in zip(info.shape, info.axes):
        target = rules[axis]
        if target is not None and size % mesh.shape[target]:
            target = None  # uneven: replicate this dimension
        physical.append(target)
    used = [p for p in physical if p is not None]
    if len(used) != len(set(used)):
        raise ValueError(f"{name}: axes {info.axes} map twice onto mesh axes {physical}")
    return PartitionSpec(*physical)


def _path_name(path) -> str:
    """"attn.q" for the pytree path of params["attn"]["q"]."""
    return ".".join(str(getattr(k, "key", k)) for k in path)


def param_shardings(cfg: QwenConfig, mesh: Mesh, rules: Rules):
    """The params pytree of NamedShardings for `cfg` under `rules`."""
    def one(path, info):
        return NamedSharding(mesh, spec_for(_path_name(path), info, rules, mesh))

    return jax.tree_util.tree_map_with_path(one, describe(cfg),
                                            is_leaf=lambda x: isinstance(x, ArrayInfo))


def describe_placement(params) -> dict[str, str]:
    """name -> "global shape / per-device shape" of every parameter, to see what is sharded."""
    out = {}
    for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
        shard = x.addressable_shards[0].data.shape
        out[_path_name(path)] = f"{tuple(x.shape)} / {tuple(shard)}"
    return out


def set_in_rows(target: jax.Array, slots: jax.Array, values: jax.Array) -> jax.Array:
    """`target` [B, N, ...] with row b's `values[b]` [P, ...] written at its `slots[b]` [P];
    slots >= N are dropped.

    Vmapped, the scatter carries the rows as a batching dimension, which a partitioner splits
    like the rows themselves; indexed by row number instead, the TPU compiler gathered every
    row's values onto every chip.
    """
    return jax.vmap(lambda t, i, v: t.at[i].set(v, mode="drop"))(target, slots, values)
