"""``python -m tpu.launch STEP --name NAME --zone ZONE [options] [-- TRAINER ARGS]``: see
`tpu.launch`.

The options are parsed strictly, so that a misspelt flag fails here, before a VM is created,
rather than in the trainer on the workers. The trainer gets exactly what follows ``--``.

The trainer's arguments are read here as the workers will read them, so that one the trainer
would not take fails here too. ``up`` first checks the run's config, with the changes those
arguments make (``--groups``, ``--set KEY=VALUE``, ...), against the slice on this machine
(`tpu.compile.preflight`: the plan where its calibration decides, else the TPU compiler, which
needs the ``tpu`` extra), and refuses to create a slice the setup would not fit, naming the
nearest setup that fits, or saying that none does. ``--skip-compile`` leaves the check out.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tpu import launch


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tpu.launch",
                                     description=launch.__doc__.split("\n")[0],
                                     usage="%(prog)s STEP --name NAME --zone ZONE [options] "
                                           "[-- TRAINER ARGS]")
    parser.add_argument("step", choices=sorted(launch.STEPS))
    parser.add_argument("--name", required=True, help="the TPU VM's name")
    parser.add_argument("--zone", required=True)
    parser.add_argument("--project")
    parser.add_argument("--accelerator-type", default=launch.Target.accelerator_type)
    parser.add_argument("--version", help="the TPU software image (default: the one for the "
                        "accelerator's chips, e.g. v2-alpha-tpuv5 for v5p)")
    parser.add_argument("--spot", action="store_true")
    parser.add_argument("--config", help="training config (YAML) to copy")
    parser.add_argument("--model", help="local model folder to copy")
    parser.add_argument("--run-dir", default=launch.Target.run_dir,
                        help="run directory on the workers (shared storage on a multi-host "
                             "slice)")
    parser.add_argument("--local-dir", default=".", help="where fetch puts the run directory")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--skip-compile", action="store_true",
                        help="up: do not compile the config for the slice before creating it")
    return parser


def overrides(train_args: Sequence[str], config: str | None = None) -> list[str]:
    """The changes the trainer's arguments make of its config (shorthands such as ``--groups``
    and each ``--set``), as ``python -m tpu.train`` reads them on the workers; with the local
    `config` the workers will train (``--config``), the settings they make are checked as the
    trainer checks them.

    Raises:
      ValueError: an argument the trainer would not take, or a setting it would refuse.
      OSError: `config` cannot be read.
    """
    from prover_jax import train
    from prover_jax.config import load as load_config
    from prover_jax.run_settings import TrainConfig
    from tpu import train as tpu_train

    _, rest = tpu_train.argument_parser().parse_known_args(train_args)
    args, unknown = train.argument_parser().parse_known_args(rest)
    if unknown:
        raise ValueError(f"the trainer takes no {' '.join(unknown)}")
    changes = train.config_changes(args)
    if config is not None:
        load_config(TrainConfig, config, changes)
    return changes


def fits_before_creating(target: launch.Target, changes: Sequence[str], echo=print) -> bool:
    """Compiles the target's config, with the trainer's `changes`, for its slice
    (`tpu.compile.preflight`); says why not when it would not fit."""
    from tpu import compile as tpu_compile

    verdict = tpu_compile.preflight(target.config, target.accelerator_type, target.model,
                                    changes, echo)
    if not verdict.fits:
        echo(f"refusing to create {target.accelerator_type}: the setup does not fit its memory; "
             f"{verdict.instead}; change the config, or pass --skip-compile")
    return verdict.fits


def _split(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """The launcher's arguments, and the trainer's: all after the first ``--`` (None when there
    is no ``--``)."""
    if "--" not in argv:
        return argv, None
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def main(argv: Sequence[str] | None = None) -> int:
    options, train_args = _split(list(sys.argv[1:] if argv is None else argv))
    parser = _parser()
    args, unknown = parser.parse_known_args(options)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (trainer arguments go "
                     "after --)")
    if train_args is not None and args.step not in launch.TRAINER_STEPS:
        parser.error(f"{args.step} takes no trainer arguments (after --)")
    try:
        target = launch.Target(
            name=args.name, zone=args.zone, project=args.project,
            accelerator_type=args.accelerator_type, version=args.version, spot=args.spot,
            config=args.config, model=args.model, run_dir=args.run_dir,
            train_args=tuple(train_args or ()), local_dir=args.local_dir)
        changes = overrides(target.train_args, target.config)
        commands = launch.STEPS[args.step](target)
        if args.step == "up" and not args.skip_compile and not fits_before_creating(target,
                                                                                    changes):
            return 1
    except (ValueError, OSError) as error:
        parser.error(str(error))
    except RuntimeError as error:  # no TPU compiler here
        parser.error(f"{error}; or pass --skip-compile")
    return launch.execute(commands, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
