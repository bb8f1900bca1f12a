"""ALFWorld's goal formulas, read from a game's PDDL problem and checked against PDDL facts.

A fact is a tuple ``(predicate, arg, ...)`` in lower case with ALFWorld's names
(``("inreceptacle", "apple 1", "countertop 1")``), as `envs.alfworld.engine.Engine.facts`
gives them. A formula is a nested tuple of its s-expression (``("and", ("isclean", "?o"),
...)``). `holds` evaluates the formulas ALFWorld's goals use: ``and``, ``or``, ``not``,
``exists``, ``forall``, ``=`` and predicates over typed variables and constants. It is the
verifier's score, separate code from the engine's goal check, and the tests compare the two on
every state of many episodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

Fact = tuple[str, ...]
Formula = tuple | str

_TOKEN = re.compile(r"[()]|[^\s()]+")
# the predicate whose facts list the things of each type
_MEMBERS = {"object": ("objecttype", 0), "receptacle": ("receptacletype", 0),
            "agent": ("atlocation", 0), "location": ("receptacleatlocation", 1),
            "otype": ("objecttype", 1), "rtype": ("receptacletype", 1)}


def parse(text: str) -> Formula:
    """The first s-expression of ``text``, lower-cased, as nested tuples."""
    tokens = _TOKEN.findall(text.lower())
    if not tokens:
        raise ValueError("pddl: empty expression")
    expression, _ = _read(tokens, 0)
    return expression


def _read(tokens: list[str], i: int) -> tuple[Formula, int]:
    if tokens[i] != "(":
        return tokens[i], i + 1
    items, i = [], i + 1
    while i < len(tokens) and tokens[i] != ")":
        item, i = _read(tokens, i)
        items.append(item)
    if i == len(tokens):
        raise ValueError("pddl: unbalanced parentheses")
    return tuple(items), i + 1


def goal(problem: str) -> Formula:
    """The ``:goal`` formula of a PDDL problem's text."""
    _, formula = _section(problem, ":goal")
    return formula


def initial_facts(problem: str) -> frozenset[Fact]:
    """The ``:init`` facts of a PDDL problem's text, in lower case with the problem's ids
    (``("objecttype", "apple_bar__plus_01_dot_00...", "appletype")``)."""
    return frozenset(_section(problem, ":init")[1:])


def _section(problem: str, name: str) -> tuple:
    """The ``(name ...)`` section of a PDDL problem's text."""
    start = problem.lower().find(f"({name}")
    if start < 0:
        raise ValueError(f"pddl: the problem has no ({name} ...)")
    return parse(problem[start:])


def typed(variables: tuple) -> list[tuple[str, str]]:
    """``(?a ?b - object ?l - location)`` (ALFWorld's templates also write ``#`` for ``-``)
    as [(variable, type)]."""
    out, pending, i = [], [], 0
    while i < len(variables):
        if variables[i] in ("-", "#"):
            out += [(v, variables[i + 1]) for v in pending]
            pending, i = [], i + 2
        else:
            pending.append(variables[i])
            i += 1
    return out + [(v, "object") for v in pending]


def literals(formula: Formula) -> Iterator[Fact]:
    """Every atomic formula in ``formula`` (under any connective or quantifier)."""
    head = formula[0]
    if head in ("and", "or", "not"):
        for part in formula[1:]:
            yield from literals(part)
    elif head in ("exists", "forall"):
        yield from literals(formula[2])
    else:
        yield formula


def holds(formula: Formula, facts: frozenset[Fact]) -> bool:
    """Whether ``formula`` is true of the state whose facts are ``facts`` (closed world)."""
    return _holds(formula, _Index(facts), {})


class _Index:
    def __init__(self, facts: frozenset[Fact]):
        self.facts = facts
        self.by_predicate: dict[str, list[Fact]] = {}
        for fact in facts:
            self.by_predicate.setdefault(fact[0], []).append(fact)

    def members(self, kind: str) -> set[str]:
        predicate, position = _MEMBERS.get(kind, (None, 0))
        if predicate is None:
            raise ValueError(f"pddl: quantifier over unknown type {kind!r}")
        return {f[position + 1] for f in self.by_predicate.get(predicate, ())}


def _value(term: str, binding: Mapping[str, str]) -> str:
    return binding[term] if term.startswith("?") else term


def _holds(formula: Formula, index: _Index, binding: dict[str, str]) -> bool:
    head = formula[0]
    if head == "and":
        return all(_holds(part, index, binding) for part in formula[1:])
    if head == "or":
        return any(_holds(part, index, binding) for part in formula[1:])
    if head == "not":
        return not _holds(formula[1], index, binding)
    if head == "=":
        return _value(formula[1], binding) == _value(formula[2], binding)
    if head in ("exists", "forall"):
        narrowed = formula[2] if head == "exists" else ("and",)
        bindings = _bindings(typed(formula[1]), narrowed, index, binding)
        truth = (_holds(formula[2], index, b) for b in bindings)
        return any(truth) if head == "exists" else all(truth)
    return tuple(_value(term, binding) for term in formula) in index.facts


def _bindings(variables: list[tuple[str, str]], body: Formula, index: _Index,
              binding: dict[str, str]) -> Iterator[dict[str, str]]:
    """The assignments of ``variables`` worth trying: every member of each variable's type,
    narrowed by the predicates among ``body``'s conjuncts to the facts that can match them
    (an existential's body; a universal passes ``("and",)``, no narrowing)."""
    if not variables:
        yield binding
        return
    (variable, kind), rest = variables[0], variables[1:]
    candidates = index.members(kind)
    conjuncts = body[1:] if body[0] == "and" else (body,)
    for literal in conjuncts:
        if literal[0] in ("and", "or", "not", "=", "exists", "forall") or variable not in literal:
            continue
        position = literal.index(variable)
        candidates &= {f[position] for f in index.by_predicate.get(literal[0], ())
                       if all(t.startswith("?") or f[k] == t
                              for k, t in enumerate(literal) if k)}
    for value in sorted(candidates):
        yield from _bindings(rest, body, index, {**binding, variable: value})
