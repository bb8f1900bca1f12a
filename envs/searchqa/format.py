"""Search-R1's interaction format: action tags, the information block, answer matching.

The agent's turn is free text (reasoning included). Its action is the *first complete* tag
pair ``<search>…</search>`` or ``<answer>…</answer>``, exactly as Search-R1's regular
expression ``<(search|answer)>(.*?)</\\1>`` (first match, dot matches newline) picks it: an
opening tag without its own closing tag later in the text is skipped, text outside the tags is
ignored, and the content is stripped. The scan here is linear in the text length, so arbitrarily
long actions cost no more than reading them.

Answers are scored by normalised exact match (SQuAD normalisation: lowercase, drop ASCII
punctuation, drop the articles a/an/the, collapse whitespace) against any gold answer.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

SEARCH, ANSWER = "search", "answer"
_TAGS = (SEARCH, ANSWER)

INVALID_FEEDBACK = (
    "\nMy previous action was not valid. To search, I must put the query between <search> and "
    "</search>. To give the final answer, I must put it between <answer> and </answer>. "
    "Let me try again.\n"
)
"""The observation after a turn with no complete search or answer tag (Search-R1's wording,
paraphrased; its first-person voice is kept because the text continues the agent's turn)."""

INSTRUCTION = (
    "Answer the given question. Think step by step inside <think> and </think> every time you "
    "receive new information. If some knowledge is missing, you can call a search engine by "
    "writing <search> query </search>; it returns the top search results between <information> "
    "and </information>. You may search as many times as you like. When no further knowledge "
    "is needed, give the final answer inside <answer> and </answer>, without a detailed "
    "explanation, for example <answer> Paris </answer>."
)
"""The system prompt: Search-R1's task description, paraphrased."""

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


class Action(NamedTuple):
    """The parsed action of one turn: ``kind`` is None when the turn has no complete tag."""

    kind: Literal["search", "answer"] | None
    content: str


def parse_action(text: str) -> Action:
    """The first complete ``<search>``/``<answer>`` tag pair of ``text`` (Search-R1's rule).

    Args:
        text: the agent's whole turn.

    Returns:
        ``Action(kind, stripped content)``, or ``Action(None, "")`` when no tag pair closes.
    """
    # An opening tag is complete iff its closing tag occurs after it; comparing with the last
    # closing tag decides that in O(1), and once an opening tag is incomplete every later one
    # of the same kind is too.
    last_close = {tag: text.rfind(f"</{tag}>") for tag in _TAGS}
    nxt = {tag: text.find(f"<{tag}>") for tag in _TAGS}
    while True:
        live = [tag for tag in _TAGS if nxt[tag] >= 0]
        if not live:
            return Action(None, "")
        tag = min(live, key=lambda t: nxt[t])
        start = nxt[tag] + len(tag) + 2
        if last_close[tag] >= start:
            end = text.find(f"</{tag}>", start)
            return Action(tag, text[start:end].strip())
        nxt[tag] = -1


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    """1.0 if ``prediction`` equals any gold answer after :func:`normalize_answer`, else 0.0."""
    prediction = normalize_answer(prediction)
    return float(any(normalize_answer(gold) == prediction for gold in golds))


def format_information(hits: Sequence[tuple[str, str, str]]) -> str:
    """The observation after a search, laid out exactly as Search-R1 lays it out.

    Args:
        hits: ``(doc_id, title, text)`` of the retrieved passages, best first.

    Returns:
        ``"\\n\\n<information>Doc 1(Title: t1) x1\\nDoc 2(Title: t2) x2</information>\\n\\n"``:
        one line per passage (a multi-line text keeps its newlines), the block stripped.
    """
    body = "".join(f"Doc {i + 1}(Title: {title}) {text}\n" for i, (_, title, text) in
                   enumerate(hits))
    return f"\n\n<information>{body.strip()}</information>\n\n"


def search_action(query: str, thought: str = "") -> str:
    """A turn that searches ``query``, optionally after a ``<think>`` block."""
    return f"{_think(thought)}<search> {query} </search>"


def answer_action(answer: str, thought: str = "") -> str:
    """A turn that answers ``answer``, optionally after a ``<think>`` block."""
    return f"{_think(thought)}<answer> {answer} </answer>"


def _think(thought: str) -> str:
    return f"<think> {thought} </think>\n" if thought else ""
