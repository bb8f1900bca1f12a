"""The mesh's axes and their sizes as a config (`MeshConfig`), importable without JAX: what a
command line reads and checks before `tpu.mesh` builds the mesh."""

from __future__ import annotations

import dataclasses
import math

AXES = ("data", "fsdp", "model")
BATCH_AXES = ("data", "fsdp")  # the axes batch rows are split over


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Sizes of the mesh axes. One of them may be -1: as many devices as the others leave."""

    data: int = 1
    fsdp: int = 1
    model: int = 1

    def __post_init__(self):
        sizes = dataclasses.astuple(self)
        if any(size < 1 and size != -1 for size in sizes) or sizes.count(-1) > 1:
            raise ValueError(f"mesh: every axis size must be >= 1, or -1 for one axis at most "
                             f"(the devices left); got {self.describe()}")

    def describe(self) -> str:
        """"data=1,fsdp=4,model=2", the form `parse` reads."""
        return ",".join(f"{axis}={size}" for axis, size in zip(AXES, dataclasses.astuple(self)))

    def shape(self, device_count: int) -> dict[str, int]:
        """axis -> size for a machine of `device_count` devices: a -1 axis takes every device
        the others leave; without one the mesh may use fewer devices than there are.

        Raises:
          ValueError: the fixed axes need more devices than there are, or (with a -1 axis) do
            not divide their number.
        """
        sizes = dict(zip(AXES, dataclasses.astuple(self)))
        fixed = math.prod(size for size in sizes.values() if size != -1)
        free = [axis for axis, size in sizes.items() if size == -1]
        if free and device_count % fixed:
            raise ValueError(f"mesh {self.describe()}: the fixed axes ({fixed} devices) do not "
                             f"divide the {device_count} devices present")
        if fixed > device_count:
            raise ValueError(f"mesh {self.describe()} needs {fixed} devices; "
                             f"{device_count} are present")
        if free:
            sizes[free[0]] = device_count // fixed
        return sizes


def parse(text: str) -> MeshConfig:
    """A MeshConfig from "data=2,fsdp=-1,model=1" (axes left out have size 1).

    Raises:
      ValueError: an unknown axis, a repeated one, or a size that is not an integer.
    """
    sizes: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        axis, _, size = item.partition("=")
        axis = axis.strip()
        if axis not in AXES or axis in sizes:
            raise ValueError(f"mesh {text!r}: {axis!r} is unknown or repeated; axes are {AXES}")
        try:
            sizes[axis] = int(size)
        except ValueError:
            raise ValueError(f"mesh {text!r}: size of {axis!r} is not an integer") from None
    return MeshConfig(**sizes)
