"""The trainer on every host of a slice: ``python -m tpu.train [DISTRIBUTED] TRAINER_ARGS``.

Joins the other processes (`tpu.distributed.initialize`: auto-detected on a TPU VM, or
``--coordinator HOST:PORT --num-processes N --process-id I``, or the ``PROVER_*`` environment),
then runs ``python -m prover_jax.train`` with the rest of the arguments. Every process rolls out
its own groups; the learner step runs on the mesh of all their devices (set it with
``--set mesh.fsdp=-1`` or a config's ``mesh:``); process 0 writes the run directory's logs and
plots, and all write their checkpoint shards (use storage every host sees).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tpu import distributed


def argument_parser() -> argparse.ArgumentParser:
    """The distributed flags; `parse_known_args` leaves the trainer's arguments."""
    parser = argparse.ArgumentParser(prog="python -m tpu.train", description=__doc__.split("\n")[0],
                                     epilog="Any other argument goes to prover_jax.train.")
    parser.add_argument("--coordinator", help="HOST:PORT of process 0")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser()
    args, rest = parser.parse_known_args(argv)
    explicit = (args.coordinator, args.num_processes, args.process_id)
    try:
        config = (distributed.DistributedConfig(*explicit) if any(v is not None for v in explicit)
                  else distributed.from_environment())
    except ValueError as error:
        parser.error(str(error))
    distributed.initialize(config)
    from prover_jax import train

    train.main(rest)


if __name__ == "__main__":
    main(sys.argv[1:])
