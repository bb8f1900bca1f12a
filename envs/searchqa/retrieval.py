"""Passages, the retriever protocol, BM25, and the user's corpus and question files.

A retriever is anything with ``search(query, k) -> [(doc_id, title, text), ...]`` (best first),
deterministic for a given query. The default is BM25 (``bm25s``, Lucene scoring) over the
passage contents (title line and text), tokenised as ``bm25s`` does by default without a
stemmer: lowercase words of two or more characters, English stopwords removed. Only passages
sharing a term with the query are returned (as a BM25 engine does), ties broken by passage
index.

User files follow the FlashRAG / Search-R1 formats:

* corpus JSONL, one ``{"id": ..., "contents": "Title\\ntext"}`` per line. The first line of
  ``contents`` is the title, kept verbatim (a wiki dump's title may be quoted, and Search-R1
  shows it quoted);
* question JSONL, one ``{"question": str, "golden_answers": [str, ...]}`` per line, with an
  optional ``"id"`` and an optional ``"supporting_ids"``: one entry per hop, each a corpus id
  or a list of alternative corpus ids, which turns on the verifier's evidence atoms.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from envs.bm25 import bm25s, stopwords
from envs.searchqa.format import exact_match

_WORD = re.compile(r"(?u)\b\w\w+\b")


class Passage(NamedTuple):
    """One retrievable passage; ``id`` is unique within its corpus."""

    id: str
    title: str
    text: str


class Hop(NamedTuple):
    """One reasoning hop of a question.

    ``support`` lists the passages that state the hop's fact (retrieving any of them satisfies
    the hop). ``need`` says in words what the hop finds, ``target`` is the entity name it
    finds (empty when unknown), and ``queries`` are the expert's search formulations, tried in
    order (empty when the expert has no plan for the hop).
    """

    support: tuple[str, ...]
    need: str = ""
    target: str = ""
    queries: tuple[str, ...] = ()


class Question(NamedTuple):
    """A task: the question, its gold answers, its hops, and a plausible wrong answer."""

    id: str
    question: str
    answers: tuple[str, ...]
    hops: tuple[Hop, ...]
    wrong_answer: str


class Retriever(Protocol):
    """Anything that searches a corpus."""

    def search(self, query: str, k: int) -> list[tuple[str, str, str]]:
        """The top ``k`` passages for ``query`` as ``(doc_id, title, text)``, best first."""
        ...


def tokenize(text: str) -> list[str]:
    """BM25 terms of ``text``: lowercase words of ≥ 2 characters, English stopwords removed."""
    words = stopwords()
    return [w for w in _WORD.findall(text.lower()) if w not in words]


class BM25Retriever:
    """BM25 over passages (title line and text); deterministic, ties broken by passage index."""

    def __init__(self, passages: Sequence[Passage]):
        if not passages:
            raise ValueError("BM25Retriever: the corpus is empty")
        self.passages = tuple(passages)
        self._bm25 = bm25s().BM25()
        self._bm25.index([tokenize(f"{p.title}\n{p.text}") for p in self.passages],
                         show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """float32 ``[num_passages]`` BM25 scores of ``query`` (a repeated term counts again)."""
        ids, counts = np.unique(self._bm25.get_tokens_ids(tokenize(query)), return_counts=True)
        scores = np.zeros(len(self.passages), np.float32)
        # Grouping repeated terms by multiplicity keeps a huge query linear in its vocabulary.
        for count in np.unique(counts):
            scores += count * self._bm25.get_scores_from_ids(ids[counts == count].tolist())
        return scores

    def search(self, query: str, k: int) -> list[tuple[str, str, str]]:
        """The top ``k`` passages with a positive score, best first, ties by passage index."""
        scores = self.scores(query)
        positive = np.flatnonzero(scores > 0)
        if len(positive) > k:
            threshold = np.partition(scores[positive], -k)[-k]
            positive = positive[scores[positive] >= threshold]
        order = positive[np.argsort(-scores[positive], kind="stable")][:k]
        return [(p.id, p.title, p.text) for p in (self.passages[i] for i in order)]


def split_contents(contents: str) -> tuple[str, str]:
    """``(title, text)`` of a FlashRAG ``contents`` string: the first line is the title."""
    title, _, text = contents.partition("\n")
    return title, text


def load_corpus(path: str | os.PathLike) -> tuple[Passage, ...]:
    """Passages of a corpus JSONL file; raises ValueError naming the file and line of a fault."""
    passages, seen = [], {}
    for line_no, record in _records(path):
        doc_id = record.get("id")
        contents = record.get("contents")
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
            raise _error(path, line_no, f'"id" must be a string or an integer, got {doc_id!r}')
        if not isinstance(contents, str):
            raise _error(path, line_no, f'"contents" must be a string, got {contents!r:.60}')
        doc_id = str(doc_id)
        if doc_id in seen:
            raise _error(path, line_no, f"duplicate id {doc_id!r} (first on line {seen[doc_id]})")
        seen[doc_id] = line_no
        passages.append(Passage(doc_id, *split_contents(contents)))
    if not passages:
        raise ValueError(f"{path}: no passages")
    return tuple(passages)


def load_questions(path: str | os.PathLike, corpus: Sequence[Passage]) -> tuple[Question, ...]:
    """Questions of a question JSONL file, checked against ``corpus``.

    Raises:
        ValueError: naming the file and line of a malformed record or an unknown supporting id.
    """
    known = {p.id for p in corpus}
    questions, first_line = [], {}
    for line_no, record in _records(path):
        question = _question(path, line_no, record, known)
        if question.id in first_line:
            raise _error(path, line_no, f"duplicate question id {question.id!r} "
                                        f"(first on line {first_line[question.id]})")
        first_line[question.id] = line_no
        questions.append(question)
    if not questions:
        raise ValueError(f"{path}: no questions")
    candidates = [q.answers[0] for q in questions] + [p.title.strip('"') for p in corpus[:50]]
    return tuple(q._replace(wrong_answer=_wrong_answer(q, candidates)) for q in questions)


@functools.lru_cache(maxsize=8)
def cached_corpus(path: str, stamp: tuple[int, int]) -> tuple[dict[str, str], BM25Retriever]:
    """Passage texts by id of a corpus file and its BM25 index, once per file version."""
    del stamp  # part of the cache key only: an edited file is read again
    retriever = BM25Retriever(load_corpus(path))
    return {p.id: p.text for p in retriever.passages}, retriever


@functools.lru_cache(maxsize=16)
def cached_questions(path: str, stamp: tuple[int, int], corpus_path: str,
                     corpus_stamp: tuple[int, int]) -> tuple[Question, ...]:
    """The questions of a question file, once per process per file version."""
    del stamp
    return load_questions(path, cached_corpus(corpus_path, corpus_stamp)[1].passages)


def file_stamp(path: str) -> tuple[int, int]:
    """``(mtime_ns, size)``: a cache key part that changes when the file does."""
    info = os.stat(path)
    return info.st_mtime_ns, info.st_size


def _records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise _error(path, line_no, f"invalid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise _error(path, line_no, f"expected a JSON object, got {type(record).__name__}")
            yield line_no, record


def _question(path, line_no: int, record: dict[str, Any], known: set[str]) -> Question:
    text, golds = record.get("question"), record.get("golden_answers")
    if not isinstance(text, str) or not text.strip():
        raise _error(path, line_no, f'"question" must be a non-empty string, got {text!r:.60}')
    if (not isinstance(golds, list) or not golds
            or not all(isinstance(g, str) for g in golds)):
        raise _error(path, line_no,
                     f'"golden_answers" must be a non-empty list of strings, got {golds!r:.60}')
    qid = record.get("id", f"line-{line_no}")
    if isinstance(qid, bool) or not isinstance(qid, str | int):
        raise _error(path, line_no, f'"id" must be a string or an integer, got {qid!r}')
    hops = tuple(Hop(_support(path, line_no, entry, known))
                 for entry in _hop_entries(path, line_no, record))
    return Question(str(qid), text.strip(), tuple(golds), hops, "")


def _hop_entries(path, line_no: int, record: dict[str, Any]) -> list[Any]:
    entries = record.get("supporting_ids", [])
    if not isinstance(entries, list):
        raise _error(path, line_no, f'"supporting_ids" must be a list, got {entries!r:.60}')
    return entries


def _support(path, line_no: int, entry: Any, known: set[str]) -> tuple[str, ...]:
    ids = entry if isinstance(entry, list) else [entry]
    if not ids or any(isinstance(i, bool) or not isinstance(i, str | int) for i in ids):
        raise _error(path, line_no, f"a supporting_ids entry must be an id or a non-empty list "
                                    f"of ids, got {entry!r:.60}")
    missing = [str(i) for i in ids if str(i) not in known]
    if missing:
        raise _error(path, line_no, f"supporting ids {missing} are not in the corpus")
    return tuple(str(i) for i in ids)


def _wrong_answer(question: Question, candidates: Sequence[str]) -> str:
    """The first candidate (another answer, a passage title) that does not match the gold."""
    return next((c for c in candidates if not exact_match(c, question.answers)), "none")


def _error(path, line_no: int, message: str) -> ValueError:
    return ValueError(f"{path}:{line_no}: {message}")
