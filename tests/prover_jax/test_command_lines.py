"""The command lines answer ``--help`` and bad settings before anything heavy loads: they read
and check their settings with the configs and the credit registry alone, and import JAX, the
model and the environments only for a run they will start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = frozenset({"jax", "jaxlib", "flax", "optax", "orbax", "transformers", "tensorboardX",
                   "torch", "openai", "models"})


def answered(module: str, *args: str) -> tuple[int, str, set[str]]:
    """(exit code, output, the heavy packages imported) of ``python -m module args``."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", module, *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    imported = {line.rpartition("|")[2].strip().split(".")[0]
                for line in run.stderr.splitlines() if line.startswith("import time:")}
    output = run.stdout + "\n".join(line for line in run.stderr.splitlines()
                                    if not line.startswith("import time:"))
    return run.returncode, output, imported & HEAVY


@pytest.mark.parametrize(("module", "args", "code", "said"), [
    ("prover_jax.train", ["--help"], 0, "prover+vict"),  # the credit methods, plug-ins included
    ("prover_jax.train", ["--stepz", "3"], 2, "unrecognized arguments: --stepz"),
    ("prover_jax.train", ["--set", "learner.optimizer.learning_rat=1"], 2,
     "unknown key learner.optimizer.learning_rat"),
    ("prover_jax.train", ["--credit", "provr"], 2, "unknown credit method 'provr'"),
    ("prover_jax.train", ["--credit", "prover", "--set", "credit_config.lamda=1"], 2,
     "unknown key credit_config.lamda"),
    ("prover_jax.train", ["--credit", "prover+vict", "--set", "credit_config.base.lam=high"], 2,
     "credit_config.base.lam: expected float"),
    ("prover_jax.train", ["--steps", "0"], 2, "must be >= 1"),
    ("prover_jax.train", ["--config", "missing.yaml"], 2, "missing.yaml"),
    ("prover_jax.train", ["--env", "housheold"], 2,
     "unknown environment 'housheold'; did you mean 'household'"),
    ("prover_jax.sft", ["--help"], 0, "SftConfig's defaults"),
    ("prover_jax.sft", ["--noise", "1.5"], 2, "noise must be in [0, 1)"),
    ("prover_jax.sft", ["--env", "househld-small"], 2,
     "unknown environment 'househld-small'; did you mean 'household-small'"),
    ("prover_jax.evaluate", ["--help"], 0, "--samples"),
    ("prover_jax.evaluate", ["--expert", "--random"], 2, "not allowed with argument"),
    ("prover_jax.evaluate", ["--env", "household", "--split", "nosuch", "--expert"], 2,
     "household has no split 'nosuch'"),
])
def test_help_and_bad_settings_are_answered_without_jax(module, args, code, said):
    returncode, output, heavy = answered(module, *args)
    assert returncode == code and said in output, output[-2000:]
    assert not heavy


def test_the_help_lists_the_environments():
    returncode, output, _ = answered("prover_jax.train", "--help")
    assert returncode == 0 and "Environments: agentgym-alfworld, " in " ".join(output.split())


@pytest.mark.parametrize("module", ["prover_jax.train", "prover_jax.sft"])
def test_resuming_with_a_changed_setting_is_a_usage_error_naming_each_one(module, tmp_path):
    """Before JAX loads; a setting a resume may change (steps) is not named."""
    from prover_jax.run_files import write_run_config
    from prover_jax.run_settings import SftConfig, TrainConfig

    config = TrainConfig(groups=2) if module == "prover_jax.train" else SftConfig(batch_size=2)
    write_run_config(tmp_path, config)
    setting = "groups" if module == "prover_jax.train" else "batch_size"
    returncode, output, heavy = answered(module, "--run-dir", str(tmp_path), "--set",
                                         f"{setting}=3", "--steps", "50", "--set", "seed=1")
    assert returncode == 2 and not heavy, output[-2000:]
    assert (f"another config ({setting}: 2 -> 3, seed: {config.seed!r} -> 1); nothing was "
            "changed") in output
