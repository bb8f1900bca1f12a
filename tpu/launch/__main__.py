"""``python -m tpu.launch STEP --name NAME --zone ZONE [options]``: see `tpu.launch`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tpu import launch


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu.launch",
                                     description=launch.__doc__.split("\n")[0])
    parser.add_argument("step", choices=sorted(launch.STEPS))
    parser.add_argument("--name", required=True, help="the TPU VM's name")
    parser.add_argument("--zone", required=True)
    parser.add_argument("--project")
    parser.add_argument("--accelerator-type", default=launch.Target.accelerator_type)
    parser.add_argument("--version", default=launch.Target.version,
                        help="the TPU software image")
    parser.add_argument("--spot", action="store_true")
    parser.add_argument("--config", help="training config (YAML) to copy")
    parser.add_argument("--model", help="local model folder to copy")
    parser.add_argument("--run-dir", default=launch.Target.run_dir,
                        help="run directory on the workers (shared storage on a multi-host "
                             "slice)")
    parser.add_argument("--local-dir", default=".", help="where fetch puts the run directory")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args, train_args = parser.parse_known_args(argv)
    try:
        target = launch.Target(
            name=args.name, zone=args.zone, project=args.project,
            accelerator_type=args.accelerator_type, version=args.version, spot=args.spot,
            config=args.config, model=args.model, run_dir=args.run_dir,
            train_args=tuple(train_args), local_dir=args.local_dir)
        commands = launch.STEPS[args.step](target)
    except ValueError as error:
        parser.error(str(error))
    return launch.execute(commands, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
