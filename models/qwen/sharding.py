"""One logical -> physical sharding table per use: the learner (FSDP) and the sampler (TP).

Every parameter names its logical axes (`params.describe`); a `Rules` table maps each logical
axis to a mesh axis or None. `param_shardings` turns the table into a `NamedSharding` per
parameter after two checks: no parameter may map two of its axes to the same mesh axis (a
collision), and a dimension that does not divide evenly by its mesh axis is replicated instead
(e.g. 2 kv heads on a 4-way model axis), which `describe_placement` reports.

Mesh axes: "data" (batch / FSDP) and "model" (tensor parallel).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from models.qwen.config import QwenConfig
from models.qwen.params import ArrayInfo, describe

Rules = Mapping[str, str | None]

# Learner: weights fully sharded over "data" along the model width, heads / MLP over "model".
LEARNER_RULES: Rules = {
    "layers": None, "vocab": "model", "embed": "data", "q_heads": "model",
    "kv_heads": "model", "head_dim": None, "mlp": "model",
    "v_heads": "model", "v_dim": None, "conv_channels": None, "conv_kernel": None,
}
# Sampler: tensor parallel only, so decoding never gathers weights across the batch axis.
SAMPLER_RULES: Rules = {
    "layers": None, "vocab": "model", "embed": None, "q_heads": "model",
    "kv_heads": "model", "head_dim": None, "mlp": "model",
    "v_heads": "model", "v_dim": None, "conv_channels": None, "conv_kernel": None,
}


def make_mesh(data: int, model: int = 1) -> Mesh:
    """A ("data", "model") mesh with automatic (propagated) sharding."""
    return jax.make_mesh((data, model), ("data", "model"),
                         axis_types=(AxisType.Auto, AxisType.Auto))


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


def shard_batch(mesh: Mesh, *arrays: np.ndarray):
    """Places arrays with a leading batch axis over the "data" mesh axis."""
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    return tuple(jax.device_put(a, sharding) for a in arrays)
