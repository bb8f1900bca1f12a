"""The platform a program is built for: that of its arrays' devices, not the process's default.

A few layout choices pay only on XLA:CPU (per-layer weights and caches for decoding, keys-major
attention scores). They must follow the devices the program is compiled for. Compiling ahead of
time for a TPU topology on a CPU host (`tpu.compile`) leaves `jax.default_backend()` at "cpu",
while the arguments' shardings name TPU devices; a traced value carries its mesh's abstract
device, and a concrete array its devices.
"""

from __future__ import annotations

import jax


def _array_platform(x) -> str | None:
    """The platform of one array, traced value or ShapeDtypeStruct, when it says (None else)."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return next(iter(x.sharding.device_set)).platform
    sharding = getattr(x, "sharding", None) if isinstance(x, jax.ShapeDtypeStruct) else None
    if isinstance(x, jax.core.Tracer):
        sharding = jax.typeof(x).sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        device = getattr(sharding.mesh, "abstract_device", None)
        if device is not None:
            return device.platform
        if isinstance(sharding.mesh, jax.sharding.Mesh) and sharding.mesh.devices.size:
            return sharding.mesh.devices.flat[0].platform
    if isinstance(sharding, jax.sharding.Sharding) and not isinstance(
            sharding, jax.sharding.NamedSharding):
        return next(iter(sharding.device_set)).platform
    return None


def platform_of(*trees) -> str:
    """"cpu", "tpu", "gpu", ...: the platform of the first array in `trees` whose devices are
    known (concrete arrays, values traced from sharded arguments, ShapeDtypeStructs with a
    sharding), else the current mesh's (`jax.set_mesh`), else `jax.default_backend()`."""
    for leaf in jax.tree.leaves(trees):
        platform = _array_platform(leaf)
        if platform is not None:
            return platform
    device = jax.sharding.get_abstract_mesh().abstract_device
    return device.platform if device is not None else jax.default_backend()
