"""The shipped recipes (`configs/recipes/*.yaml`) load as the configs their commands read:
``sft-*`` files as `SftConfig`, the others as `TrainConfig`. A renamed or retyped setting makes
a recipe a usage error for its user, so it fails here first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prover_jax.config import load
from prover_jax.run_settings import SftConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "configs" / "recipes").glob("*.yaml"))
TRAIN = [path for path in RECIPES if not path.name.startswith("sft-")]
HEAVY = ("jax", "jaxlib", "flax", "optax", "orbax", "transformers", "torch", "models")


def config_type(path: Path) -> type:
    return SftConfig if path.name.startswith("sft-") else TrainConfig


def test_there_are_recipes_of_both_kinds():
    assert TRAIN and len(TRAIN) < len(RECIPES)


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.name)
def test_recipe_loads_and_names_its_own_command(path):
    config = load(config_type(path), path, [])
    assert config.chat is not None and config.chat.reply == "tool_call"
    assert config.learner.compute_dtype == "bfloat16" and config.learner.remat
    # the header's command runs this very file
    assert f"configs/recipes/{path.name}" in path.read_text()


@pytest.mark.parametrize("path", TRAIN, ids=lambda path: path.name)
def test_train_recipe_samples_a_real_model(path):
    config = load(TrainConfig, path, [])
    assert config.sampling.dtype == "bfloat16"
    # every turn stays in the stream: the cap holds the reply budget and then some
    assert config.sampling.max_context is not None
    assert config.sampling.max_context > config.sampling.max_new_tokens
    # the outcome-only baseline every header names runs from the same file
    assert load(TrainConfig, path, ["credit=grpo"]).credit == "grpo"


def test_recipes_load_without_jax():
    """`--help` and a bad setting answer before JAX loads; so must reading a recipe."""
    code = ("import sys\nfrom pathlib import Path\nfrom prover_jax.config import load\n"
            "from prover_jax.run_settings import SftConfig, TrainConfig\n"
            "for p in sorted(Path('configs/recipes').glob('*.yaml')):\n"
            "    load(SftConfig if p.name.startswith('sft-') else TrainConfig, p, [])\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"
