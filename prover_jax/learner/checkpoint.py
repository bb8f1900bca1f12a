"""Checkpoints of a TrainState: orbax, atomic, keep-last-N, verified on restore.

A checkpoint is the whole `TrainState` (float32 params, optimizer state, step, RNG key data and
data position) in one orbax step directory `DIR/<step>`. Orbax writes it into a temporary
directory and renames it when complete, so a process killed mid-save leaves either the previous
checkpoints alone or a temporary directory that the next `Checkpoints` removes. After the rename
a `checksums.json` (SHA-256 of every file, written to a temporary file and renamed) seals it.

`restore` walks the checkpoints newest first and takes the first that is sealed, matches its
checksums and restores cleanly. Each one it skips raises a warning naming the step and the fault
and is moved to `DIR/corrupt/<step>`, out of orbax's sight (so the step can be saved again) but
kept for inspection. A sound checkpoint whose arrays do not fit the target (another model or
optimizer) is an error naming the first difference, and nothing is moved. A restored state has
the shardings of the target, so training on from it repeats exactly the steps an uninterrupted
run would have taken, as long as the step itself is deterministic: it is on CPU; on GPU set
`XLA_FLAGS=--xla_gpu_deterministic_ops=true` (otherwise atomic scatter-adds in the backward pass
differ by an ulp from run to run).

Single-writer: on several hosts, process 0 seals and moves checkpoints; the others only read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import warnings
from pathlib import Path

import jax
import orbax.checkpoint as ocp

from prover_jax.learner.step import TrainState

CHECKSUMS = "checksums.json"
QUARANTINE = "corrupt"


def without_missing_metadata(record: logging.LogRecord) -> bool:
    """False for orbax's notice that a step has no ``_CHECKPOINT_METADATA`` file (steps are
    checked by their `CHECKSUMS` here), which it logs on every restore; True otherwise."""
    return not str(record.msg).startswith("Metadata file does not exist")


logging.getLogger("absl").addFilter(without_missing_metadata)


def _as_dict(state: TrainState) -> dict:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(TrainState)}


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CHECKSUMS)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checksums(folder: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under `folder` (except the checksum file)."""
    return {str(p.relative_to(folder)): _sha256(p) for p in _files(folder)}


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def seal(folder: Path) -> None:
    """Writes `folder/checksums.json`, atomically."""
    _write_atomically(folder / CHECKSUMS, json.dumps(checksums(folder), indent=0))


def fault(folder: Path) -> str | None:
    """Why the checkpoint in `folder` cannot be trusted, or None when its checksums match."""
    sealed = folder / CHECKSUMS
    if not sealed.exists():
        return f"no {CHECKSUMS} (the save did not finish)"
    try:
        expected = json.loads(sealed.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable {CHECKSUMS}: {e}"
    actual = checksums(folder)
    missing = sorted(set(expected) - set(actual))
    if missing:
        return f"missing files {missing[:3]}"
    changed = sorted(name for name, digest in expected.items() if actual[name] != digest)
    if changed:
        return f"files changed since the save {changed[:3]}"
    return None


def _leaves_by_name(tree) -> dict:
    """{"opt_state/1/0/mu/embed": leaf, ...}: one naming for dict keys, attributes and indices
    (orbax's metadata stores a named tuple as a dict)."""
    def name(entry) -> str:
        for attribute in ("key", "name", "idx"):
            if hasattr(entry, attribute):
                return str(getattr(entry, attribute))
        return str(entry)

    return {"/".join(map(name, path)): leaf
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


class Checkpoints:
    """Keep-last-N checkpoints of a TrainState in one directory.

    Args:
      directory: where the step directories live (created if missing).
      keep: how many of the newest checkpoints to keep.
    """

    def __init__(self, directory: str | os.PathLike, keep: int = 3):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep!r}")
        self.directory = Path(directory).absolute()
        self._manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=False, cleanup_tmp_directories=True))

    def steps(self) -> list[int]:
        """Steps of the checkpoints on disk, oldest first (not yet verified)."""
        return sorted(self._manager.all_steps())

    def save(self, state: TrainState) -> int:
        """Saves `state` as the checkpoint of step `state.step`; returns the step.

        Blocks until the checkpoint is on disk and sealed; the oldest checkpoints beyond
        `keep` are deleted.
        """
        step = int(state.step)
        newest = max(self._manager.all_steps(), default=-1)
        if step <= newest:
            raise ValueError(f"cannot save step {step}: {self.directory} already holds step "
                             f"{newest}; checkpoints must advance")
        self._manager.save(step, args=ocp.args.StandardSave(_as_dict(state)))
        self._manager.wait_until_finished()
        if jax.process_index() == 0:
            seal(self.directory / str(step))
        return step

    def restore(self, target: TrainState) -> TrainState | None:
        """The newest good checkpoint, restored into the shapes, dtypes and shardings of
        `target` (e.g. `Learner.abstract_state()`), or None when there is none.

        Warns (RuntimeWarning) about every checkpoint it skips, newest first.
        """
        for step in reversed(self.steps()):
            folder = self.directory / str(step)
            problem = fault(folder)
            if problem is None:
                difference = self._mismatch(step, target)
                if difference is not None:
                    raise ValueError(
                        f"the checkpoint of step {step} in {self.directory} belongs to another "
                        f"model or config: {difference}. Nothing was changed; resume with the "
                        "model it was trained with, or use another checkpoint directory")
                try:
                    restored = self._manager.restore(
                        step, args=ocp.args.StandardRestore(_as_dict(target)))
                    return TrainState(**restored)
                except Exception as e:  # any failure means: fall back to an older one
                    problem = f"restore failed: {type(e).__name__}: {e}"
            warnings.warn(f"checkpoint of step {step} in {self.directory} is unusable: {problem}"
                          f"; moved to {QUARANTINE}/ and falling back to an older one",
                          RuntimeWarning, stacklevel=2)
            self._quarantine(folder)
        return None

    def _mismatch(self, step: int, target: TrainState) -> str | None:
        """The first array whose stored shape or presence differs from `target`'s, in words;
        None when they agree (or the metadata cannot be read: restoring then decides)."""
        try:
            with ocp.StandardCheckpointer() as reader:
                # "default": the item name CheckpointManager gives a single-item save
                stored = reader.metadata(self.directory / str(step) / "default").item_metadata
        except Exception:  # unreadable metadata is a fault for `restore` to report
            return None
        if stored is None:
            return None
        ours, theirs = (_leaves_by_name(tree) for tree in (_as_dict(target), dict(stored)))
        for name in sorted(set(ours) | set(theirs)):
            if name not in theirs:
                return f"it has no {name}"
            if name not in ours:
                return f"it has {name}, which this run does not"
            if tuple(theirs[name].shape) != tuple(ours[name].shape):
                return (f"{name} has shape {tuple(theirs[name].shape)}, this run's "
                        f"{tuple(ours[name].shape)}")
        return None

    def _quarantine(self, folder: Path) -> None:
        if jax.process_index() == 0:
            target = self.directory / QUARANTINE / folder.name
            target.parent.mkdir(exist_ok=True)
            suffix = 0
            while target.exists():
                suffix += 1
                target = target.with_name(f"{folder.name}.{suffix}")
            os.replace(folder, target)
        self._manager.reload()

    def close(self) -> None:
        """Releases orbax's resources."""
        self._manager.close()
