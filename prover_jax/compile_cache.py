"""The persistent XLA compilation cache of the command-line entry points.

``python -m prover_jax.train`` (and ``sft``, ``evaluate``, the server) compile the same programs
on every run of a config: the learner's step, the sampler's prefill and turns. With the cache a
second run, a resume or an evaluation of the same model loads them instead. It lives in
``$PROVER_JAX_CACHE`` (default ``~/.cache/prover_jax/xla``; ``off`` disables it). A
``JAX_COMPILATION_CACHE_DIR`` set in the environment is JAX's own setting and wins.

Several processes share it (two runs at once, the processes of a ``jax.distributed`` run on one
host). Without a size bound JAX writes an entry in place and reads it without a lock, so a
process can load another's half-written program. With a bound (`MAX_BYTES`, least recently used
programs evicted beyond it) every read and write holds a file lock; each write also scans the
folder, cheap for a run's few dozen programs (the test suite's thousands stay unbounded). A
bounded cache keeps each entry's last use in a file beside it; `track` gives one to the entries
an unbounded process wrote (an older checkout's), which JAX would otherwise fail on at every
write.

Measured on 2 CPU cores with README's main command (a tiny model, 3 steps): the first step
takes 22.9 s with an empty cache and 11.6 s with the first run's (the rest is tracing and
programs too quick to cache); the whole run 35.5 s and 24.5 s.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DEFAULT = Path("~/.cache/prover_jax/xla")
VARIABLE = "PROVER_JAX_CACHE"
MAX_BYTES = 4 << 30


def directory(environ: dict[str, str] | None = None) -> Path | None:
    """Where the cache lives under ``environ`` (default ``os.environ``); None when it is off
    or JAX's own variable decides."""
    environ = os.environ if environ is None else environ
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    value = environ.get(VARIABLE, str(DEFAULT))
    return None if value.lower() in ("", "off", "0", "none") else Path(value).expanduser()


def enable(environ: dict[str, str] | None = None) -> Path | None:
    """Points JAX's persistent compilation cache at `directory`; returns it (None: unchanged).
    Programs that compile in under a second are not worth a file and stay uncached."""
    path = directory(environ)
    if path is None:
        return None
    import jax

    path.mkdir(parents=True, exist_ok=True)
    track(path)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path


def track(path: Path) -> None:
    """Gives every entry of the cache in ``path`` that has no last-use file one (now), as JAX's
    bounded cache keeps them."""
    now = time.time_ns().to_bytes(8, "little")
    for entry in path.glob("*-cache"):
        last_use = entry.with_name(entry.name.removesuffix("-cache") + "-atime")
        if not last_use.exists():
            last_use.write_bytes(now)
