"""Test setup: 8 fake CPU devices, quick compiles, hypothesis profile, random batches."""

from __future__ import annotations

import os
from pathlib import Path

# Before anything imports jax. Sharding tests need several devices; on CPU, fake them. The
# test programs are tiny, so compiling them dominates the suite: LLVM optimisation level 0
# compiles them ~30% faster (bench/ measures the optimised programs). `make test` runs two
# processes on two cores, so each runs its matmuls on one thread instead of contending.
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", "")] + [
    flag for flag in ("--xla_force_host_platform_device_count=8",
                      "--xla_backend_optimization_level=0",
                      "--xla_cpu_multi_thread_eigen=false")
    if flag.split("=")[0] not in os.environ.get("XLA_FLAGS", "")]).strip()

# Many tests build the same tiny programs anew (a Learner per test, a trainer per subprocess):
# the persistent compilation cache compiles each of them once per checkout, in every process the
# tests start (they inherit the environment). It is left unbounded: a bound would lock it
# (`prover_jax.compile_cache`), but JAX then scans the whole folder at every write, and the
# suite's thousands of programs made that 4 minutes slower on 2 cores.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      str(Path(__file__).parents[1] / ".pytest_cache" / "xla"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

# libtpu (the tpu extra) is installed for tests/tpu/test_compile.py, which compiles for TPU
# topologies without a TPU; the tests themselves run on the CPU backend
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings

from prover_jax.batch import Message, Trajectory, pack

settings.register_profile(
    "prover", max_examples=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "prover"))

REWARDS = st.sampled_from([0.0, 0.0, 1.0, 1.0, 0.5, 0.25])


@st.composite
def trajectories(draw, max_turns: int = 5) -> Trajectory:
    """A conversation: system prompt, then per turn an assistant action and an observation."""
    n_turns = draw(st.integers(1, max_turns))
    tokens = st.lists(st.integers(1, 99), min_size=1, max_size=3)
    messages = [Message(draw(tokens), "system")]
    for t in range(n_turns):
        messages.append(Message(draw(tokens), "assistant", t))
        if t < n_turns - 1 or draw(st.booleans()):
            messages.append(Message(draw(tokens), "tool"))
    return Trajectory(messages, draw(REWARDS))


@st.composite
def groups(draw, max_groups: int = 4, max_size: int = 4):
    n = draw(st.integers(1, max_groups))
    return [draw(st.lists(trajectories(), min_size=1, max_size=max_size)) for _ in range(n)]


@st.composite
def batches(draw):
    """A packed Batch (numpy arrays) with random padding rows.

    Shapes are fixed (B=16, T=8, L=64) so each kernel compiles once per test module; other
    shapes are covered by the hand-derived and padding tests.
    """
    return pack(draw(groups()), min_len=64, min_turns=8, row_multiple=16)

