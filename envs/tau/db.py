"""A domain's database as shared base tables plus each episode's copy-on-write changes.

The base tables are loaded once per process and never mutated. An episode owns only the records
it has written, each stored as its JSON text — an immutable, picklable value — in first-write
order (:data:`Changes`), so a snapshot costs O(changed records) and never copies the database.
A :class:`Db` is the working view of one tool call: it reads through the changes to the base and
hands out private mutable copies for writing; :meth:`Db.changes` folds them back into text,
including writes made before a tool raised (the benchmark's tools mutate in place, so a tool
that fails half-way leaves its earlier writes behind, and so does this view).

Hashing follows the benchmark: the canonical form of a value is ``str`` of a nested tuple in
which dict items are sorted by key and lists keep their order, and two databases are equal iff
their canonical forms are. Two databases over the same base are equal iff the records that
either one changed have equal canonical forms, so :func:`db_hash` digests only the records that
differ from the base: equal hashes iff equal benchmark hashes (:func:`full_hash`, which digests
the whole materialised database and costs O(database)), at O(changes) cost.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

Changes = tuple[tuple[str, str, str], ...]
"""``(table, key, record JSON)`` of every record an episode wrote, in first-write order."""


def canonical(value: Any) -> Hashable:
    """The benchmark's order-independent form: dicts as key-sorted item tuples, lists as tuples."""
    if isinstance(value, dict):
        return tuple((key, canonical(item)) for key, item in sorted(value.items()))
    if isinstance(value, list):
        return tuple(canonical(item) for item in value)
    if isinstance(value, set):
        return tuple(sorted(canonical(item) for item in value))
    return value


def digest(value: Any) -> str:
    """sha256 (hex) of ``str(canonical(value))``, the benchmark's hash applied to one value."""
    return hashlib.sha256(str(canonical(value)).encode("utf-8")).hexdigest()


class Base:
    """A domain's initial database: read-only tables ``{table: {key: record}}``.

    Nothing may mutate the tables; record digests are computed on first use and cached.
    """

    def __init__(self, tables: Mapping[str, Mapping[str, Any]]):
        self.tables = tables
        self._digests: dict[tuple[str, str], str] = {}

    def digest(self, table: str, key: str) -> str | None:
        """The digest of a base record, or None where the base has no such record."""
        if key not in self.tables[table]:
            return None
        cached = self._digests.get((table, key))
        if cached is None:
            cached = self._digests[(table, key)] = digest(self.tables[table][key])
        return cached


class Db:
    """The database seen by one tool call: ``base`` overlaid with an episode's ``changes``.

    Tools read with :meth:`read` / :meth:`has` / :meth:`items` and must treat what they read as
    read-only; they get a private mutable copy of a record with :meth:`edit` (later reads see
    it) and add records with :meth:`insert`.
    """

    def __init__(self, base: Base, changes: Changes = ()):
        self.base = base
        self._text = {(table, key): text for table, key, text in changes}
        self._decoded: dict[tuple[str, str], Any] = {}
        self._live: dict[tuple[str, str], Any] = {}

    def has(self, table: str, key: str) -> bool:
        """Whether ``table`` holds ``key`` (raises TypeError for an unhashable key, like dicts)."""
        return (key in self.base.tables[table] or (table, key) in self._text
                or (table, key) in self._live)

    def read(self, table: str, key: str) -> Any:
        """The current record (do not mutate it); KeyError(key) where there is none."""
        slot = (table, key)
        if slot in self._live:
            return self._live[slot]
        if slot in self._text:
            if slot not in self._decoded:
                self._decoded[slot] = json.loads(self._text[slot])
            return self._decoded[slot]
        return self.base.tables[table][key]

    def keys(self, table: str) -> list[str]:
        """Every key of ``table``: base keys in file order, then added keys in insertion order."""
        base = self.base.tables[table]
        added = [k for t, k in (*self._text, *self._live) if t == table and k not in base]
        return [*base, *dict.fromkeys(added)]

    def items(self, table: str) -> Iterator[tuple[str, Any]]:
        """``(key, record)`` pairs of ``table`` in :meth:`keys` order (records read-only)."""
        for key in self.keys(table):
            yield key, self.read(table, key)

    def edit(self, table: str, key: str) -> Any:
        """A mutable copy of the record that this call writes back; KeyError(key) if absent."""
        slot = (table, key)
        if slot not in self._live:
            text = self._text.get(slot)
            self._live[slot] = json.loads(text if text is not None else json.dumps(
                self.base.tables[table][key]))
        return self._live[slot]

    def insert(self, table: str, key: str, record: Any) -> None:
        """Adds (or replaces) a record; ``record`` now belongs to this view."""
        self._live[(table, key)] = record

    def changes(self) -> Changes:
        """The episode's changes including this call's writes, in first-write order."""
        text = dict(self._text)
        for slot, record in self._live.items():
            text[slot] = json.dumps(record)
        return tuple((table, key, value) for (table, key), value in text.items())


def differing(base: Base, changes: Changes) -> tuple[tuple[str, str, str], ...]:
    """``(table, key, digest)`` of every changed record that differs from the base, sorted."""
    out = []
    for table, key, text in changes:
        record_digest = digest(json.loads(text))
        if record_digest != base.digest(table, key):
            out.append((table, key, record_digest))
    return tuple(sorted(out))


def db_hash(base: Base, changes: Changes) -> str:
    """A hash of the database: equal for two change sets iff the databases are equal."""
    return hashlib.sha256(repr(differing(base, changes)).encode("utf-8")).hexdigest()


def materialise(base: Base, changes: Changes) -> dict[str, dict[str, Any]]:
    """The whole database as plain dicts (shares unchanged base records; do not mutate)."""
    tables = {table: dict(records) for table, records in base.tables.items()}
    for table, key, text in changes:
        tables[table][key] = json.loads(text)
    return tables


def full_hash(base: Base, changes: Changes) -> str:
    """The benchmark's own database hash: sha256 of the whole database's canonical form."""
    return digest(materialise(base, changes))
