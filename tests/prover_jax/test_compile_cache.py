"""The entry points' persistent compilation cache: where it lives, that its readers and writers
lock it, and a second process that compiles the same program loads it from there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prover_jax import compile_cache

ROOT = Path(__file__).resolve().parents[2]


def test_the_cache_directory_follows_the_environment(tmp_path):
    assert compile_cache.directory({}) == compile_cache.DEFAULT.expanduser()
    assert compile_cache.directory({"PROVER_JAX_CACHE": str(tmp_path)}) == tmp_path
    assert compile_cache.directory({"PROVER_JAX_CACHE": "off"}) is None
    assert compile_cache.directory({"JAX_COMPILATION_CACHE_DIR": "/elsewhere"}) is None


SCRIPT = """
import sys
from prover_jax import compile_cache
path = compile_cache.enable()
import jax, jax.numpy as jnp
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # a tiny program
from jax._src import monitoring
hits = []
monitoring.register_event_listener(lambda event, **kw: hits.append(event))
jax.jit(lambda x: jnp.sin(x) @ x.T).lower(jnp.ones((64, 64))).compile()
print(path, "/jax/compilation_cache/cache_hits" in hits)
"""


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PROVER_JAX_CACHE": str(tmp_path / "xla"),
           "JAX_PLATFORMS": "cpu", "HOME": str(tmp_path)}

    def run() -> str:
        return subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, check=True,
                              capture_output=True, text=True).stdout.split()

    assert run() == [str(tmp_path / "xla"), "False"]
    assert any((tmp_path / "xla").glob("*-cache"))
    assert (tmp_path / "xla" / ".lockfile").exists()  # the write held the lock
    assert run() == [str(tmp_path / "xla"), "True"]


def test_the_docs_state_the_cache_bound():
    text = " ".join((ROOT / "docs" / "training.md").read_text().split())
    assert f"kept under {compile_cache.MAX_BYTES >> 30} GiB" in text


def test_a_bounded_cache_takes_over_the_entries_of_an_unbounded_one(tmp_path):
    """An entry written without the bound has no last-use file; without `track` every later
    write to the cache fails (JAX warns and keeps nothing)."""
    env = {"PATH": "/usr/bin:/bin", "PROVER_JAX_CACHE": str(tmp_path / "xla"),
           "JAX_PLATFORMS": "cpu", "HOME": str(tmp_path)}
    unbounded = SCRIPT.replace(
        "path = compile_cache.enable()",
        "path = compile_cache.enable()\n"
        "import jax; jax.config.update('jax_compilation_cache_max_size', -1)")
    subprocess.run([sys.executable, "-c", unbounded], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    written = len(list((tmp_path / "xla").glob("*-cache")))
    assert written and not any((tmp_path / "xla").glob("*-atime"))
    another = SCRIPT.replace("jnp.sin(x) @ x.T", "jnp.cos(x) @ x.T")
    done = subprocess.run([sys.executable, "-c", another], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True)
    assert "Error writing" not in done.stderr, done.stderr[-2000:]
    entries = len(list((tmp_path / "xla").glob("*-cache")))
    assert entries > written and len(list((tmp_path / "xla").glob("*-atime"))) == entries
