"""Run directories as models: the architecture and tokenizer a run trains, and its weights.

A run directory of the trainer or of `prover_jax.sft` keeps the model it trains in ``model/``:
the Hugging Face ``config.json`` and the tokenizer files (with the chat template), but no
weights; those are in its checkpoints. `load` turns a run directory (its newest checkpoint, or
the weights in ``model/`` of a run's record kept without checkpoints) or a Hugging Face model
folder into ``(cfg, params, tokenizer)``, so evaluation, a warm start (``--init``) and a user's
own code read either the same way; `export` writes a run's model as such a folder (``python -m
prover_jax.runs RUN_DIR FOLDER``), with the run's environment in ``trained.json``, which
`trained_env` reads. Beside its config, a model folder holds ``chat.json``: the chat setting
(`prover_jax.settings.ChatConfig`) the model was trained with, which `chat_for` hands to the
next stage. The model's modules load in the functions that read or write weights, so
a command line can read a run's settings (`trained_env`) without loading JAX.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prover_jax.config import add_dry_run, build, dry_run_lines, to_dict
from prover_jax.settings import ChatConfig

if TYPE_CHECKING:
    from models.qwen import QwenConfig

MODEL = "model"
TRAINED = "trained.json"  # in an exported model folder: {"env": ...}
CHAT = "chat.json"  # in a model folder: the ChatConfig the model was trained with


def save_model(directory: str | Path, cfg: QwenConfig, tokenizer, chat: ChatConfig) -> None:
    """Writes ``directory/model/`` (config, tokenizer and chat setting) unless it is there."""
    from models import qwen

    folder = Path(directory) / MODEL
    if not (folder / "config.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(folder)
        (folder / "config.json").write_text(json.dumps(qwen.to_hf_config(cfg), indent=2) + "\n")
    if not (folder / CHAT).exists():
        (folder / CHAT).write_text(json.dumps(to_dict(chat)) + "\n")


def stored_chat(path: str | Path) -> ChatConfig | None:
    """The chat setting stored with the model at `path` (a run directory or a model folder);
    None when it has none.

    Raises:
      ValueError: a ``chat.json`` that is not a valid setting, naming the file.
    """
    path = Path(path)
    for file in (path / MODEL / CHAT, path / CHAT):
        if file.exists():
            try:
                return build(ChatConfig, json.loads(file.read_text()), "chat.")
            except ValueError as e:
                raise ValueError(f"{file}: {e}") from None
    return None


def chat_for(configured: ChatConfig | None, stored: ChatConfig | None,
             model: str | Path | None) -> tuple[ChatConfig, str | None]:
    """The chat setting a stage uses, and a warning when it is not `stored`, the one its
    `model` was trained with (`stored_chat`): `configured` if set, else `stored`, else the
    default."""
    if configured is None:
        return stored or ChatConfig(), None
    if stored is not None and stored != configured:
        return configured, (f"warning: chat {to_dict(configured)} is not the {to_dict(stored)} "
                            f"{model} was trained with")
    return configured, None


def is_run(path: str | Path) -> bool:
    """Whether `path` is a run directory holding its model."""
    path = Path(path)
    return (path / "config.json").exists() and (path / MODEL / "config.json").exists()


def load(path: str | Path):
    """``(cfg, float32 params, tokenizer)`` of a run directory's newest checkpoint, or of a
    Hugging Face model folder.

    Raises:
      FileNotFoundError: neither a run directory with a checkpoint nor a model folder.
    """
    from models import qwen
    from models.qwen.chat import load_tokenizer

    path = Path(path)
    if not is_run(path):
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path}: neither a run directory (config.json and model/) "
                                    "nor a Hugging Face model folder")
        cfg, params = qwen.load(path)
        return cfg, params, load_tokenizer(path)
    from prover_jax.learner import Checkpoints, Learner, LearnerConfig

    cfg = qwen.read_config(path / MODEL)
    learner_config = build(LearnerConfig, json.loads((path / "config.json").read_text())
                           .get("learner", {}), "learner.")
    checkpoints = Checkpoints(path / "checkpoints")
    try:
        state = checkpoints.restore(Learner(cfg, learner_config).abstract_state())
    finally:
        checkpoints.close()
    if state is None:
        if (path / MODEL / "model.safetensors").exists():  # a record: the weights kept there
            return load(path / MODEL)
        raise FileNotFoundError(f"{path}: the run has no checkpoint yet")
    return cfg, state.params, load_tokenizer(path / MODEL)


def trained_env(path: str | Path) -> str | None:
    """The environment the model at `path` was trained on: a run directory's, the run's whose
    ``model/`` folder `path` is, or an exported folder's (``trained.json``); None if unknown."""
    path = Path(path)
    for run in (path, path.parent):
        if is_run(run) and (run == path or path.name == MODEL):
            return json.loads((run / "config.json").read_text()).get("env")
    if (path / TRAINED).exists():
        return json.loads((path / TRAINED).read_text()).get("env")
    return None


def export(run_dir: str | Path, folder: str | Path) -> Path:
    """Writes the newest checkpoint of `run_dir` (float32 weights, config, tokenizer) as a
    Hugging Face model folder that `load`, ``--init`` and `transformers` read; returns it."""
    from models import qwen

    cfg, params, tokenizer = load(run_dir)
    qwen.save(folder, cfg, params)
    tokenizer.save_pretrained(folder)
    (Path(folder) / TRAINED).write_text(json.dumps({"env": trained_env(run_dir)}) + "\n")
    (Path(folder) / CHAT).write_text(json.dumps(to_dict(stored_chat(run_dir) or ChatConfig()))
                                     + "\n")
    return Path(folder)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="export a run directory's newest checkpoint "
                                     "as a Hugging Face model folder")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("folder", type=Path)
    add_dry_run(parser)
    args = parser.parse_args(argv)
    if args.dry_run:
        print("\n".join([*dry_run_lines(None, [args.run_dir]), f"  writes {args.folder}"]))
        return
    print(export(args.run_dir, args.folder))


if __name__ == "__main__":
    main()
