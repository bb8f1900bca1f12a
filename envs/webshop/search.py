"""BM25 product search with a deterministic ranking.

Like WebShop's search engine (Lucene BM25 over product text, English stop words removed), a
query returns at most the top 50 products that share a term with it. Scores come from
``bm25s`` (Lucene's BM25 variant); ties are broken by catalogue index, never by the library's
internal order, so a query's ranking is a pure function of the catalogue. Unlike Lucene, no
stemming is applied. Results are cached per query.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from envs.bm25 import bm25s, stopwords

TOP_N = 50
_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric runs of ``text`` without English stop words."""
    words = stopwords()
    return [t for t in _TOKEN.findall(text.lower()) if t not in words]


class SearchIndex:
    """A BM25 index over documents ``0 .. n-1``; :meth:`search` returns document indices."""

    def __init__(self, documents: Sequence[str], cache_size: int = 1 << 14):
        self._bm25 = bm25s().BM25()
        self._bm25.index([tokenize(d) for d in documents], show_progress=False)
        self._vocab: dict[str, int] = self._bm25.vocab_dict
        self._cached = functools.lru_cache(maxsize=cache_size)(self._rank)

    def search(self, keywords: str) -> tuple[int, ...]:
        """The top ``TOP_N`` documents matching ``keywords``: best score first, ties by index."""
        return self._cached(keywords)

    def _rank(self, keywords: str) -> tuple[int, ...]:
        ids = [self._vocab[t] for t in tokenize(keywords) if t in self._vocab]
        if not ids:
            return ()
        scores = self._bm25.get_scores_from_ids(ids)
        hits = np.flatnonzero(scores > 0)
        ranked = hits[np.argsort(-scores[hits], kind="stable")[:TOP_N]]
        return tuple(ranked.tolist())
