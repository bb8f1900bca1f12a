"""`python -m tpu.compile` for every preset on larger Cloud TPU slices: v4-32, v5p-32, v5p-128.

Each preset, on each slice, with its mesh over every chip (``fsdp=-1``) and the papers'
workload (`tpu.plan.Workload`; on v5p-128's 64 chips, 2 micro-batches, so that 128 rows split
over them), is compiled as ``python -m tpu.compile`` compiles it (`tpu.compile.compile_setup`,
and where the memory analysis puts a phase above the chip, `held_to_chip`), without a TPU. The
table gives the compiler's memory per chip with the planner's beside it, whether the step
fits, the learner step's collectives and the roofline bounds (`tpu.compile.estimates`).

Compiling takes minutes per setup on a CPU, so each finished setup is written to
bench/results/topologies.json as it completes, a rerun compiles only the setups missing there,
and ``--report`` rebuilds the table from the file.

Usage: python bench/topologies.py [--only SUBSTRING] [--report]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report
from bench.plan import PAPERS, PARTS, Case, planned, setup_of
from tpu import compile as tpu_compile
from tpu import plan

RESULTS = report.BENCH / "results" / "topologies.json"
MACHINE = f"the TPU compiler (libtpu, no TPU) on {report.machine()}"
SLICES = {"v4-32": {}, "v5p-32": {}, "v5p-128": {"micro_batches": 2}}  # workload changes
NAMES = [f"{model} {slice_name}" for slice_name in SLICES for model in plan.PRESETS]


def case_of(name: str) -> Case:
    """The setup of a result's name ("MODEL SLICE"): the papers' workload, changed as `SLICES`
    says for the slice, over every chip (``fsdp=-1``)."""
    model, slice_name = name.split()
    return Case(model, slice_name, work=dataclasses.replace(PAPERS, **SLICES[slice_name]))


def measure(case: Case) -> dict:
    """`tpu.compile.to_json` of the report the setup's fit is decided on."""
    return tpu_compile.to_json(tpu_compile.fitted_report(setup_of(case)))


def ratios(name: str, record: dict) -> dict[str, float]:
    """Plan / the compiler's memory analysis and plan / its live peak, of the learner and the
    sampler, with the planner's lines as they are now."""
    plan_bytes, programs = planned(case_of(name)), record["programs"]
    out = {}
    for part, names in PARTS.items():
        out[part] = plan_bytes[part] / max(programs[n]["peak"] for n in names)
        out[f"{part}_live"] = plan_bytes[part] / max(programs[n]["live"] for n in names)
    return out


def row(name: str, record: dict) -> str:
    """A table line of one recorded setup."""
    setup, (model, slice_name) = setup_of(case_of(name)), name.split()
    programs, ratio = record["programs"], ratios(name, record)
    usable = plan.HEADROOM * plan.CHIPS[setup.slice.family]
    gathered, _ = programs["learner step"]["collectives"]["all-gather"]
    reduced, _ = programs["learner step"]["collectives"]["all-reduce"]
    estimate = record["estimates"]
    seconds = sum(p["seconds"] for p in programs.values())
    return (f"| {model} | {slice_name} ({setup.slice.chips} chips, {setup.slice.hosts} hosts) | "
            f"{record['learner_peak'] / plan.GiB:.2f} | {ratio['learner']:.2f}, "
            f"{ratio['learner_live']:.2f} | {record['sampler_peak'] / plan.GiB:.2f} | "
            f"{ratio['sampler']:.2f}, {ratio['sampler_live']:.2f} | "
            f"{record['peak'] / plan.GiB:.2f} of {usable / plan.GiB:.1f} | "
            f"{'yes' if record['fits'] else 'no'}{' (held)' if record['held'] else ''} | "
            f"{gathered}, {reduced} | {estimate['learner_s']:.2f}, "
            f"{estimate['learner_mfu']:.0%} | {estimate['decode_tokens_per_s']:,.0f} | "
            f"{seconds:.0f} |")


def table(recorded: dict) -> str:
    header = ("| model | slice | learner GiB | plan / compiler, / live peak | sampler GiB | "
              "plan / compiler, / live peak | step peak GiB of usable | fits | learner "
              "all-gathers, all-reduces | learner step >= s, MFU <= | decode tokens/s <= | "
              "compile s |\n|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    lines = [row(name, recorded[name]) for name in NAMES if name in recorded]
    return "\n".join([header, *lines])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="setups whose key contains this")
    parser.add_argument("--report", action="store_true", help="only rebuild the table")
    args = parser.parse_args(argv)
    recorded = json.loads(RESULTS.read_text())["results"] if RESULTS.exists() else {}
    for name in NAMES:
        if args.report or args.only not in name or name in recorded:
            continue
        recorded[name] = measure(case_of(name))
        print(row(name, recorded[name]), flush=True)
        RESULTS.write_text(json.dumps({"machine": MACHINE, "results": recorded}, indent=1))
    body = table(recorded)
    print(body)
    report.write("topologies", "Every preset on larger slices (`bench/topologies.py`)", MACHINE,
                 body, recorded)


if __name__ == "__main__":
    main()
