"""prover_jax.platforms: the command lines leave out a TPU the machine does not have."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prover_jax import platforms

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def libtpu(monkeypatch):
    """libtpu installed, and the CUDA plugins as each test says."""
    cuda = []
    monkeypatch.setattr(platforms, "installed",
                        lambda module: module == "libtpu" or module in cuda)
    return cuda


def test_the_tpu_is_left_out_only_where_there_is_none(tmp_path, libtpu):
    environ = {}
    assert platforms.skip_absent_tpu(environ, tmp_path) == "cpu" == environ["JAX_PLATFORMS"]
    (tmp_path / "nvidia0").touch()
    libtpu.append("jax_cuda13_plugin")
    assert platforms.skip_absent_tpu({}, tmp_path) == "cuda,cpu"
    mine = {"JAX_PLATFORMS": "tpu"}
    assert platforms.skip_absent_tpu(mine, tmp_path) is None and mine == {"JAX_PLATFORMS": "tpu"}
    for device in ("accel0", "vfio/0"):  # a TPU VM: v4 or v5e, v5p or v6e
        tpu_vm = tmp_path / device.replace("/", "-")
        (tpu_vm / device).parent.mkdir(parents=True, exist_ok=True)
        (tpu_vm / device).touch()
        environ = {}
        assert platforms.skip_absent_tpu(environ, tpu_vm) is None and environ == {}


def test_without_libtpu_nothing_is_set(tmp_path, monkeypatch):
    monkeypatch.setattr(platforms, "installed", lambda module: False)
    environ = {}
    assert platforms.skip_absent_tpu(environ, tmp_path) is None and environ == {}


@pytest.mark.slow
@pytest.mark.skipif(not platforms.installed("libtpu") or platforms.has_tpu(Path("/dev")),
                    reason="needs libtpu installed on a machine without a TPU")
def test_a_command_line_on_a_machine_without_a_tpu_prints_no_libtpu_errors():
    environ = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, "-m", "prover_jax.evaluate",
                           "experiments/results/runs/sft", "--tasks", "1", "--max-actions", "1",
                           "--max-new-tokens", "4"], capture_output=True, text=True, env=environ,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "libtpu" not in done.stderr and "E0000" not in done.stderr
    assert "host bounds" not in done.stderr, done.stderr
