"""``bm25s``, imported when an index is first built.

Importing ``bm25s`` runs a JAX computation (it probes ``jax.lax.top_k``), which starts JAX's
default backend. Imported at the top of the environments, it would take the accelerator in
every process that imports them, before a trainer could call ``jax.distributed.initialize``.
"""

from __future__ import annotations

import functools
import logging


@functools.cache
def bm25s():
    """The ``bm25s`` module, its logger at warnings and above (it sets itself to DEBUG)."""
    import bm25s as module

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return module


@functools.cache
def stopwords() -> frozenset[str]:
    """``bm25s``'s English stop words."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)
