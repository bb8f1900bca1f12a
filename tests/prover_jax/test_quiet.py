"""Third-party notices the package silences at their source, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_TORCH = """
import importlib.util, sys
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a, **k: None if name == "torch" else found(name, *a, **k)
if sys.argv[1] == "package":
    import prover_jax
import transformers
"""


def test_transformers_advice_about_a_missing_pytorch_is_not_printed():
    """As on the base install (no PyTorch): transformers advises at import, unless the
    package came first."""
    environ = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}

    def notices(first: str) -> int:
        run = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, first], cwd=ROOT,
                             env=environ, capture_output=True, text=True, check=True)
        return run.stderr.count("PyTorch was not found")

    assert notices("transformers") == 1 and notices("package") == 0


IMPORTS_THEN_BACKEND = """
import bm25s
from jax._src import xla_bridge
started = xla_bridge.backends_are_initialized()
import prover_jax.trainer, envs.webshop, envs.searchqa, envs.searchqa.retrieval
print(started, xla_bridge.backends_are_initialized())
"""


def test_importing_the_trainer_and_environments_starts_no_jax_backend():
    """So a script may import the package, then call ``jax.distributed.initialize`` (which
    must come first on a pod): ``bm25s`` runs JAX at its import, and is imported lazily."""
    script = IMPORTS_THEN_BACKEND.replace("import bm25s\n", "")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert run.stdout.split() == ["False", "False"]
    eager = subprocess.run([sys.executable, "-c", IMPORTS_THEN_BACKEND], cwd=ROOT,
                           capture_output=True, text=True, check=True)
    assert eager.stdout.split()[0] == "True"  # what an import at the top would do
