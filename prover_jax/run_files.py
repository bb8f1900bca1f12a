"""The files of a run directory that the trainer and SFT share, importable without JAX: the
resolved config (``config.json``) a resume is checked against, the settings each resume changed
(``config_changes.json``), the environment's task source (``tasks.json``), and how credited a
sampled group is (``samples.jsonl``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import envs
from prover_jax.config import flatten, to_dict, without_secrets

CONFIG_FILE, METRICS, CHECKPOINTS = "config.json", "metrics", "checkpoints"
TASKS_FILE = "tasks.json"  # the environment's task source (`envs.Env.task_source`)
CHANGES_FILE = "config_changes.json"  # the settings each resume changed, with its step
# Settings a resume may change: they change neither the updates nor the random draws (an
# episode plays the same whichever worker runs it; the mesh too, so a run moves between
# machines); a trailing "." covers a whole section.
RESUMABLE_CHANGES = ("steps", "run_dir", "mesh.data", "mesh.fsdp", "mesh.model",
                     "checkpoint_every", "eval_every", "eval_at_start", "evaluation.",
                     "gradient_shares_every", "workers")


def config_differences(directory: Path, config) -> dict[str, tuple[Any, Any]]:
    """Each dotted setting in which ``config`` (a `TrainConfig` or `SftConfig`) differs from
    the one the run directory was started with, as (stored, ours); empty when it holds none.
    A chat setting of None (the model's stored one, resolved when the model loads) is not
    compared."""
    path = directory / CONFIG_FILE
    if not path.exists():
        return {}
    # a setting added since the run started ran with its default
    stored = {**flatten(to_dict(type(config)())),
              **with_chat_keys(flatten(json.loads(path.read_text())))}
    ours = flatten(without_secrets(to_dict(config)))
    compared = sorted(k for k in set(stored) | set(ours) if config.chat is not None
                      or not (k == "chat" or k.startswith("chat.")))
    return {k: (stored.get(k), ours.get(k)) for k in compared if stored.get(k) != ours.get(k)}


def changes_line(changes: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())


def check_run_config(directory: Path, config) -> None:
    """Raises a ValueError naming every setting in which ``config`` differs from the one the
    run directory was started with, but for those a resume may change (`RESUMABLE_CHANGES`)."""
    differing = {k: v for k, v in config_differences(directory, config).items()
                 if not resumable(k)}
    if differing:
        raise ValueError(f"{directory} holds a run with another config "
                         f"({changes_line(differing)}); nothing was changed: resume with the "
                         f"same settings (a resume may change only {', '.join(RESUMABLE_CHANGES)})"
                         " or use another run directory")


def check_run_tasks(directory: Path, source: Mapping[str, Any]) -> None:
    """Raises a ValueError when the run directory's tasks came from another source than
    ``source`` (`envs.Env.task_source`): ALFWorld's data found since, or gone, would change
    every task under the run. The environment, the kind of source and the tasks per split must
    match; folders may differ (a run moves between machines)."""
    path = directory / TASKS_FILE

    def identity(record: Mapping[str, Any]) -> tuple:
        return record["env"], record["tasks"], json.dumps(record["splits"], sort_keys=True)

    if path.exists() and identity(json.loads(path.read_text())) != identity(source):
        stored = envs.source_line(json.loads(path.read_text()))
        raise ValueError(f"{directory} holds a run of other tasks ({stored}) than this "
                         f"environment has now ({envs.source_line(source)}); nothing was "
                         "changed: resume where the same tasks are, or use another run "
                         "directory")


def write_run_tasks(directory: Path, source: Mapping[str, Any]) -> None:
    """Writes the run's task source (`TASKS_FILE`)."""
    (directory / TASKS_FILE).write_text(json.dumps(source, indent=2) + "\n")


def with_chat_keys(stored: dict) -> dict:
    """A stored flat config of a run started before the chat setting existed, as it reads now:
    SFT's ``reply`` is ``chat.reply``, and a run without either wrote text replies."""
    if any(key == "chat" or key.startswith("chat.") for key in stored):
        return stored
    return {**{k: v for k, v in stored.items() if k != "reply"},
            "chat.reply": stored.get("reply", "text")}


def resumable(key: str) -> bool:
    """Whether the dotted setting ``key`` may change when a run resumes."""
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE_CHANGES)


def write_run_config(directory: Path, config) -> None:
    """Writes ``config`` (a `TrainConfig` or `SftConfig`) as the run directory's resolved
    config, atomically, without its secrets (an API key in ``host.judge_config`` is written as
    `config.REDACTED`)."""
    path = directory / CONFIG_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(without_secrets(to_dict(config)), indent=2) + "\n")
    tmp.replace(path)


def record_config_changes(directory: Path, config, step: int) -> str | None:
    """Appends the settings a resume at `step` changes (`config_differences`, all resumable
    once `check_run_config` passed) to the run's `CHANGES_FILE`, as {"step": step, "changes":
    {key: [before, now]}}; returns them as one line, None when none changed."""
    changes = config_differences(directory, config)
    if not changes:
        return None
    path = directory / CHANGES_FILE
    recorded = json.loads(path.read_text()) if path.exists() else []
    recorded.append({"step": step, "changes": {k: list(v) for k, v in changes.items()}})
    path.write_text(json.dumps(recorded, indent=2) + "\n")
    return changes_line(changes)


def most_credited(added: Sequence[Any]) -> tuple[int, float]:
    """How far some turns' credit departs from the flat outcome advantage, from what each source
    added to it (float arrays): the sources that act on them, then the sum of what they added in
    absolute value; the larger, the more credited."""
    return (sum(bool(np.any(value)) for value in added),
            float(sum(np.abs(value).sum() for value in added)))
