"""Which JAX platforms the command lines start, decided before JAX loads.

With ``libtpu`` installed (the ``tpu`` extra, or a test install that compiles for TPU
topologies) JAX tries the TPU backend first on every machine; on one without a TPU that prints
libtpu's errors (``Failed to find host bounds``, ``unexpected worker hostname``) before falling
back. `skip_absent_tpu` leaves the TPU out where there is none, so that a CPU or GPU machine runs
quietly. It never overrides a ``JAX_PLATFORMS`` the user set, and the TPU compiler's own command
lines (`tpu.compile`, `tpu.plan`), which need libtpu without a TPU, do not call it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin")


def has_tpu(devices: Path) -> bool:
    """Whether the machine shows a TPU: ``/dev/accel*`` (v2-v5e) or ``/dev/vfio/<n>`` (v5p and
    later)."""
    return any(devices.glob("accel[0-9]*")) or any((devices / "vfio").glob("[0-9]*"))


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def skip_absent_tpu(environ: MutableMapping[str, str] = os.environ,
                    devices: Path = Path("/dev")) -> str | None:
    """Sets ``JAX_PLATFORMS`` to the platforms other than the TPU ("cuda,cpu" where a CUDA
    plugin and an NVIDIA device are there, else "cpu") when libtpu is installed, the machine
    has no TPU and ``JAX_PLATFORMS`` is unset; returns what it set (None: nothing). Where JAX is
    imported already its setting follows, which counts until its first device is used."""
    if "JAX_PLATFORMS" in environ or not installed("libtpu") or has_tpu(devices):
        return None
    gpu = any(map(installed, CUDA_PLUGINS)) and any(devices.glob("nvidia[0-9]*"))
    environ["JAX_PLATFORMS"] = platforms = "cuda,cpu" if gpu else "cpu"
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_platforms", platforms)
    return platforms
