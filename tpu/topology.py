"""Cloud TPU slices as the TPU compiler sees them, without a TPU.

`devices("v5p-64")` gives the devices of that slice from `libtpu` (the ``tpu`` extra) through
`jax.experimental.topologies`: the same device kinds, coordinates and hosts a real slice has, so
`jax.jit(...).lower(abstract inputs).compile()` on them runs the TPU compiler on a CPU-only
machine (`tpu.compile`).

Names, as ``gcloud`` takes them in ``--accelerator-type``:
- v4-N and v5p-N count TensorCores: N / 2 chips, one JAX device per chip (megacore), a 3-D
  torus of 4 chips per host (v5p-32: 16 chips, 2x2x4, 4 hosts);
- v5e-N (also written v5litepod-N) and v6e-N count chips, a 2-D torus: up to 8 chips on one
  host, 4 chips per host beyond that (v5e-16: 4x4, 4 hosts).
A JAX topology string ("v5e:2x4", "v5p:2x2x4") is taken as well.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from collections.abc import Iterator

# Per slice family: dimensions of the torus, TensorCores a name counts per chip, chips per host
# (bounds of a host's block) when a slice spans several hosts.
FAMILIES = {
    "v4": (3, 2, (2, 2, 1)),
    "v5p": (3, 2, (2, 2, 1)),
    "v5e": (2, 1, (2, 2, 1)),
    "v6e": (2, 1, (2, 2, 1)),
}
ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "v6lite": "v6e"}
SINGLE_HOST_CHIPS = {"v4": 4, "v5p": 4, "v5e": 8, "v6e": 8}

# Unless told otherwise, libtpu queries the metadata server of the TPU VM it is not on, logs
# errors about the worker variables that VM would set, and lets one process at a time load it
# (a lock file in /tmp). libtpu reads these when it loads.
DEVICELESS_ENVIRONMENT = {"TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
                          "TPU_WORKER_HOSTNAMES": "localhost", "TPU_WORKER_ID": "0",
                          "TPU_ACCELERATOR_TYPE": "v5litepod-1"}


@dataclasses.dataclass(frozen=True)
class Slice:
    """One TPU slice: its family ("v5p"), torus shape and hosts."""

    family: str
    shape: tuple[int, ...]  # chips along each torus axis

    @property
    def chips(self) -> int:
        return math.prod(self.shape)

    @property
    def host_bounds(self) -> tuple[int, int, int]:
        """The block of chips one host holds, as (x, y, z)."""
        if self.chips <= SINGLE_HOST_CHIPS[self.family]:
            return (*self.shape, 1, 1)[:3]
        return FAMILIES[self.family][2]

    @property
    def hosts(self) -> int:
        return self.chips // math.prod(self.host_bounds)

    @property
    def topology_name(self) -> str:
        """The JAX topology string: "v5p:2x2x4"."""
        return f"{self.family}:{'x'.join(map(str, self.shape))}"

    @property
    def accelerator_type(self) -> str:
        """The gcloud name: "v5p-32", "v5litepod-8"."""
        cores = self.chips * FAMILIES[self.family][1]
        return f"{'v5litepod' if self.family == 'v5e' else self.family}-{cores}"


def torus(chips: int, dims: int) -> tuple[int, ...]:
    """The standard shape of a slice of `chips` chips (a power of two) on a `dims`-D torus: from
    1x1 (2-D) or one host's 2x2x1 block (3-D), doubling the shortest axis, the last of the
    shortest on a tie (2x2, 2x4, 4x4, 4x8; 2x2x2, 2x2x4, 2x4x4, 4x4x4).

    Raises:
      ValueError: `chips` is not a power of two, or below one host's block in 3-D.
    """
    if chips < 1 or chips & (chips - 1):
        raise ValueError(f"topology: {chips} chips is not a power of two")
    shape = [1] * dims if dims == 2 else [2, 2, 1]
    if math.prod(shape) > chips:
        raise ValueError(f"topology: {dims}-D slices start at {math.prod(shape)} chips, "
                         f"not {chips}")
    while math.prod(shape) < chips:
        shortest = min(shape)
        shape[max(i for i, n in enumerate(shape) if n == shortest)] *= 2
    return tuple(shape)


def parse_slice(name: str) -> Slice:
    """A Slice from "v5p-32", "v5litepod-8", "v6e-8" or "v5e:2x4".

    Raises:
      ValueError: an unknown family, a count that is not a power of two (or, for v4 / v5p, odd),
        or a topology string whose dimensions do not match its family.
    """
    text = name.strip().lower()
    match = re.fullmatch(r"([a-z0-9]+?)(?:-(\d+)|:(\d+(?:x\d+)*))", text)
    family = ALIASES.get(match.group(1), match.group(1)) if match else None
    if family not in FAMILIES:
        raise ValueError(f"topology {name!r}: expected FAMILY-COUNT or FAMILY:AxBxC with FAMILY "
                         f"one of {', '.join(FAMILIES)} (or v5litepod), e.g. v5p-32, v5e-8, "
                         f"v5e:2x4")
    dims, cores_per_chip, _ = FAMILIES[family]
    if match.group(3):
        shape = tuple(int(n) for n in match.group(3).split("x"))
        if len(shape) != dims or min(shape) < 1:
            raise ValueError(f"topology {name!r}: {family} slices have {dims} dimensions")
        return Slice(family, shape)
    count = int(match.group(2))
    if count % cores_per_chip:
        raise ValueError(f"topology {name!r}: {family}-N counts TensorCores, {cores_per_chip} "
                         f"per chip; {count} is not a multiple")
    return Slice(family, torus(count // cores_per_chip, dims))


@contextlib.contextmanager
def deviceless_environment() -> Iterator[None]:
    """`DEVICELESS_ENVIRONMENT` while libtpu loads, then the environment as it was (the worker
    variables would make `tpu.distributed` take this machine for a TPU VM). Variables already
    set are kept."""
    added = {k: v for k, v in DEVICELESS_ENVIRONMENT.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def devices(name: str | Slice) -> list:
    """The devices of a slice, one per chip, for compiling ahead of time (no TPU needed).

    Raises:
      ValueError: a bad name (`parse_slice`).
      RuntimeError: libtpu is not installed (``pip install 'prover-jax[tpu]'``).
    """
    spec = name if isinstance(name, Slice) else parse_slice(name)
    from jax.experimental import topologies

    try:
        with deviceless_environment():
            description = topologies.get_topology_desc(
                platform="tpu", topology_name=spec.topology_name,
                chips_per_host_bounds=spec.host_bounds,
                **({"chip_config_name": "megacore"} if spec.family == "v4" else {}))
    except RuntimeError as error:
        raise RuntimeError(f"topology {spec.topology_name}: the TPU compiler is unavailable "
                           f"({error}); install the tpu extra: pip install "
                           f"'prover-jax[tpu]'") from error
    found = list(description.devices)
    if len(found) != spec.chips:
        raise RuntimeError(f"topology {spec.topology_name}: libtpu gave {len(found)} devices "
                           f"for {spec.chips} chips")
    return found
