"""Cloud TPU VM launch: ``python -m tpu.launch STEP --name NAME --zone ZONE [options]``.

Steps, each a short sequence of `gcloud` commands (and one local `git archive`):
- ``create``: a TPU VM or pod slice (``--accelerator-type v5litepod-8``, ``--spot``), with the
  TPU software image its chips take (`RUNTIMES`; ``--version`` to choose another);
- ``install``: this checkout's committed tree, copied to every worker and installed with the
  ``tpu`` extra into a virtual environment (``~/prover-venv``) of Python 3.11 or later: the
  images' own Python is 3.10, so where the worker has no newer one, Ubuntu's ``python3.11`` is
  installed first;
- ``copy``: a config file and, if given, a local model folder to ``~/run/`` on every worker;
- ``train``: ``python -m tpu.train`` started on all workers at once (``--worker=all``), in the
  background, logging to ``~/run/train.log``, with the arguments after ``--`` appended
  (``-- --steps 5 --set sampling.temperature=0.7``);
- ``logs``: follow worker 0's log;
- ``fetch``: copy the run directory from worker 0;
- ``delete``: delete the VM;
- ``up``: create, install, copy and train (also takes trainer arguments after ``--``).

An unknown option is a usage error (status 2) before anything runs, and so is ``--`` after a
step other than ``train`` and ``up``: nothing reaches the trainer except what follows ``--``.

``--dry-run`` prints the commands and runs none. Otherwise they run one after another and the
first that fails stops the step, with its exit status.

On a slice of several hosts the run directory must be storage every worker sees (an NFS or
gcsfuse mount): every worker writes its shards of a checkpoint there.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from tpu import topology

ROOT = Path(__file__).resolve().parents[2]
REMOTE_SOURCE = "prover-jax"  # in the workers' home directories
REMOTE_RUN = "run"
REMOTE_VENV = "prover-venv"
REMOTE_PYTHON = f"{REMOTE_VENV}/bin/python"
TARBALL = "prover-jax.tar.gz"
# The TPU software image (gcloud's --version) of each chip family's VMs
RUNTIMES = {"v4": "tpu-ubuntu2204-base", "v5e": "v2-alpha-tpuv5-lite", "v5p": "v2-alpha-tpuv5",
            "v6e": "v2-alpha-tpuv6e"}
# A Python of at least 3.11 on a worker: its own, else Ubuntu's python3.11
FIND_PYTHON = ("PY=$(command -v python3.13 || command -v python3.12 || command -v python3.11) || "
               "{ sudo apt-get -qq update && sudo apt-get -qq install -y python3.11 "
               "python3.11-venv && PY=python3.11; }")

Command = list[str]


@dataclasses.dataclass(frozen=True)
class Target:
    """The TPU VM the steps act on, and what they need."""

    name: str
    zone: str
    project: str | None = None
    accelerator_type: str = "v5litepod-8"
    version: str | None = None  # the TPU software image (None: the chips' own, `RUNTIMES`)
    spot: bool = False
    config: str | None = None  # a training config (YAML) to copy
    model: str | None = None  # a local model folder to copy
    run_dir: str = f"{REMOTE_RUN}/out"  # on the workers, relative to home
    train_args: tuple[str, ...] = ()  # more arguments for tpu.train
    local_dir: str = "."  # where fetch puts the run directory
    tarball: str = f"/tmp/{TARBALL}"

    def __post_init__(self):
        for field in ("name", "zone"):
            if not getattr(self, field):
                raise ValueError(f"--{field} is required")
        topology.parse_slice(self.accelerator_type)  # an unknown type fails before any step

    @property
    def runtime(self) -> str:
        """The TPU software image the VM is created with."""
        return self.version or RUNTIMES[topology.parse_slice(self.accelerator_type).family]


def _gcloud(target: Target, *words: str) -> Command:
    project = [f"--project={target.project}"] if target.project else []
    return ["gcloud", "compute", "tpus", "tpu-vm", *words, f"--zone={target.zone}", *project]


def _ssh(target: Target, command: str, worker: str = "all") -> Command:
    return _gcloud(target, "ssh", target.name, f"--worker={worker}", f"--command={command}")


def _scp(target: Target, source: str, destination: str, worker: str = "all",
         recurse: bool = False) -> Command:
    return _gcloud(target, "scp", *(["--recurse"] if recurse else []), source, destination,
                   f"--worker={worker}")


def create(target: Target) -> list[Command]:
    """The VM (or slice)."""
    spot = ["--spot"] if target.spot else []
    return [_gcloud(target, "create", target.name,
                    f"--accelerator-type={target.accelerator_type}",
                    f"--version={target.runtime}", *spot)]


def install(target: Target) -> list[Command]:
    """This checkout's committed tree on every worker, installed with the tpu extra in a
    virtual environment of Python 3.11 or later."""
    unpack = (f"mkdir -p {REMOTE_SOURCE} && tar -xzf {TARBALL} -C {REMOTE_SOURCE} && "
              f"{FIND_PYTHON} && $PY -m venv {REMOTE_VENV} && "
              f"{REMOTE_PYTHON} -m pip install --quiet -e '{REMOTE_SOURCE}[tpu]'")
    return [["git", "-C", str(ROOT), "archive", "--format=tar.gz",
             f"--output={target.tarball}", "HEAD"],
            _scp(target, target.tarball, f"{target.name}:{TARBALL}"),
            _ssh(target, unpack)]


def copy(target: Target) -> list[Command]:
    """The config (and the model folder) into ``~/run/`` on every worker."""
    if target.config is None:
        raise ValueError("copy: --config is required")
    commands = [_ssh(target, f"mkdir -p {REMOTE_RUN}"),
                _scp(target, target.config, f"{target.name}:{REMOTE_RUN}/config.yaml")]
    if target.model is not None:
        commands.append(_scp(target, target.model, f"{target.name}:{REMOTE_RUN}/model",
                             recurse=True))
    return commands


def train(target: Target) -> list[Command]:
    """The trainer on all workers at once, in the background."""
    args = ["--config", f"{REMOTE_RUN}/config.yaml", "--run-dir", target.run_dir]
    if target.model is not None:
        args += ["--init", f"{REMOTE_RUN}/model"]
    trainer = shlex.join([REMOTE_PYTHON, "-m", "tpu.train", *args, *target.train_args])
    command = f"cd ~ && nohup {trainer} > {REMOTE_RUN}/train.log 2>&1 < /dev/null &"
    return [_ssh(target, command)]


def logs(target: Target) -> list[Command]:
    """Follows worker 0's training log."""
    return [_ssh(target, f"tail -n 200 -f {REMOTE_RUN}/train.log", worker="0")]


def fetch(target: Target) -> list[Command]:
    """The run directory from worker 0 into ``local_dir``."""
    return [_scp(target, f"{target.name}:{target.run_dir}", target.local_dir, worker="0",
                 recurse=True)]


def delete(target: Target) -> list[Command]:
    """Deletes the VM, without asking."""
    return [_gcloud(target, "delete", target.name, "--quiet")]


def up(target: Target) -> list[Command]:
    """create, install, copy, train."""
    return [*create(target), *install(target), *copy(target), *train(target)]


STEPS: dict[str, Callable[[Target], list[Command]]] = {
    "create": create, "install": install, "copy": copy, "train": train, "logs": logs,
    "fetch": fetch, "delete": delete, "up": up}
TRAINER_STEPS = frozenset({"train", "up"})  # the steps that pass `Target.train_args` on


def execute(commands: Sequence[Command], dry_run: bool, echo=print,
            run=subprocess.run) -> int:
    """Runs `commands` in order (or only prints them); the exit status of the first that
    fails (0 when all succeed), after which nothing more runs."""
    for command in commands:
        echo(("would run: " if dry_run else "+ ") + shlex.join(command))
        if dry_run:
            continue
        status = run(command).returncode
        if status != 0:
            echo(f"stopped: `{shlex.join(command[:5])} ...` exited with status {status}")
            return status
    return 0
