"""The agentic judge's tools (ProVer paper §3.3): search the failures, read exact turns.

* ``search_trajectory(query, k)`` — BM25 (the project's :class:`BM25Retriever`: lowercase words,
  English stopwords removed, ties broken by document order) over every turn of the failed
  trajectories, a turn's document being its observation and action. Returns up to ``k`` (at
  most ``max_search_k``) hits that share a term with the query, best first, each a bounded
  one-line turn preview with its trajectory id and turn index.
* ``get_segment(traj_id, start_turn, end_turn)`` — the inclusive turn range of any trajectory of
  the group, opening with the observation the policy saw before ``start_turn``; cut to
  ``result_chars``.

A bad call (unknown tool, malformed JSON arguments, out-of-range turns) is answered with an
``error: ...`` text the judge can act on; it still counts against the tool-call budget.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envs import json_text
from envs.searchqa.retrieval import BM25Retriever, Passage, tokenize
from prover_jax.judges.base import TrajectoryView
from prover_jax.judges.render import clip, header, one_line, render_turns

SCHEMAS = (
    {"type": "function", "function": {
        "name": "search_trajectory",
        "description": "Lexical (BM25) search over every turn of the failed trajectories. "
                       "Returns the top-k turn previews with trajectory id and turn index.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "k": {"type": "integer", "description": "how many turns to return"}},
            "required": ["query", "k"]}}},
    {"type": "function", "function": {
        "name": "get_segment",
        "description": "The inclusive turn range [start_turn, end_turn] of a trajectory of "
                       "the group, preceded by the observation the agent saw before "
                       "start_turn.",
        "parameters": {"type": "object", "properties": {
            "traj_id": {"type": "integer"},
            "start_turn": {"type": "integer"},
            "end_turn": {"type": "integer"}},
            "required": ["traj_id", "start_turn", "end_turn"]}}},
)


class ToolError(ValueError):
    """A tool call the judge got wrong; the message goes back to it."""


class Toolbox:
    """The tools over one group: its successful trajectory and its failures.

    Raises:
      ValueError: when two trajectories share an id.
    """

    def __init__(self, success: TrajectoryView, failures: Sequence[TrajectoryView],
                 max_search_k: int = 10, turn_chars: int = 300, result_chars: int = 4000):
        self.trajectories = {t.id: t for t in (success, *failures)}
        if len(self.trajectories) != 1 + len(failures):
            raise ValueError("the trajectories of a group need distinct ids")
        self.max_search_k = max_search_k
        self.turn_chars = turn_chars
        self.result_chars = result_chars
        self._hits = [(t.id, turn) for t in failures for turn in t.turns]
        documents = [f"{turn.observation}\n{turn.action}" for _, turn in self._hits]
        # BM25 cannot index a corpus without a single term; such a corpus matches nothing.
        self._index = (BM25Retriever([Passage(str(i), "", d) for i, d in enumerate(documents)])
                       if any(tokenize(d) for d in documents) else None)

    def run(self, name: str, arguments: str) -> str:
        """The text result of one tool call with JSON ``arguments``; never raises."""
        try:
            args = json_text.loads(arguments)
        except ValueError as e:
            return f"error: arguments are not valid JSON ({e})"
        try:
            if not isinstance(args, dict):
                raise ToolError("arguments must be a JSON object")
            if name == "search_trajectory":
                return json.dumps(self.search_trajectory(
                    _arg(args, "query", str), _arg(args, "k", int)))
            if name == "get_segment":
                return self.get_segment(_arg(args, "traj_id", int),
                                        _arg(args, "start_turn", int), _arg(args, "end_turn", int))
            raise ToolError(f"unknown tool {name!r}; the tools are search_trajectory and "
                            f"get_segment")
        except ToolError as e:
            return f"error: {e}"

    def search_trajectory(self, query: str, k: int) -> list[dict[str, Any]]:
        """Up to ``k`` failed turns matching ``query``, best first, as bounded previews."""
        if not 1 <= k <= self.max_search_k:
            raise ToolError(f"k must be in 1..{self.max_search_k}, got {k}")
        if self._index is None:
            return []
        hits = [self._hits[int(doc_id)] for doc_id, _, _ in self._index.search(query, k)]
        return [{"traj_id": traj_id, "turn": turn.index,
                 "preview": clip(one_line(f"action: {turn.action}"
                                          f"{'' if turn.valid else ' [invalid]'} | observation "
                                          f"before it: {turn.observation}"), self.turn_chars)}
                for traj_id, turn in hits]

    def get_segment(self, traj_id: int, start_turn: int, end_turn: int) -> str:
        """Turns ``start_turn..end_turn`` of trajectory ``traj_id``, cut to ``result_chars``."""
        trajectory = self.trajectories.get(traj_id)
        if trajectory is None:
            raise ToolError(f"unknown traj_id {traj_id}; known ids: {sorted(self.trajectories)}")
        last = len(trajectory.turns) - 1
        if not 0 <= start_turn <= end_turn <= last:
            raise ToolError(f"need 0 <= start_turn <= end_turn <= {last} for trajectory "
                            f"{traj_id}, got {start_turn}..{end_turn}")
        text = (f"{header(trajectory)}, turns {start_turn}..{end_turn}\n"
                f"{render_turns(trajectory, start_turn, end_turn)}")
        return clip(text, self.result_chars)


def _arg(args: dict[str, Any], name: str, kind: type) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ToolError(f"argument {name!r} must be a {kind.__name__}, got {value!r:.40}")
    return value
