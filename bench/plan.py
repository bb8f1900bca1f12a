"""`tpu.plan` against the TPU compiler, for every preset on the papers' workload.

Each setup (a preset on a Cloud TPU slice, its mesh over every chip, the workload) is compiled
ahead of time by `tpu.compile` for the slice's devices (libtpu; no TPU needed): the learner's
train step, the learner -> sampler reshard, and the sampler's prefill and turn. The compiler's
per-device memory of each program is recorded, and the planner's lines are set beside it:
plan / compiler above 1 is conservative; `tpu.plan.BAND` is the most it may be. The compiler's
own peak of live bytes is recorded too, and the plan set beside it (plan / live peak).

Compiling takes minutes per setup on a CPU, so every finished setup is written to
bench/results/plan.json as it completes, a rerun skips the setups already there, and
``--report`` rebuilds the table from the file alone (with the planner as it is now). After a
change to the sampler's programs, ``--redo-sampler`` compiles them again for the recorded
setups and keeps the rest of each record.

Usage: python bench/plan.py [--only SUBSTRING] [--report | --redo-sampler]
Prints a table, writes bench/results/plan.json and updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report
from tpu import compile as tpu_compile
from tpu import plan, topology
from tpu.mesh import MeshConfig, build_mesh

RESULTS = report.BENCH / "results" / "plan.json"
MACHINE = f"the TPU compiler (libtpu, no TPU) on {report.machine()}"
PAPERS = plan.Workload()  # 16 groups of 8, 2,048 + 512 tokens, 8 micro-batches, bf16, remat


class Case(NamedTuple):
    model: str
    slice: str
    mesh: MeshConfig = MeshConfig(fsdp=-1)
    work: plan.Workload = PAPERS

    @property
    def key(self) -> str:
        work = f"{self.work.rows}x{self.work.length}"
        head = " head per device" if self.work.head_per_device else ""
        return f"{self.model} {self.slice} {self.mesh.describe()} {work}{head}"


# The small presets on one host of v5e (16 GiB chips), the large ones on two hosts of v5p, and
# a v6e host; then the first example, a 0.6B on v5e-8 at 32 rows x 2,048 tokens; and
# the 0.6B on v5e-8 with the LM head run on each device's rows (`head_per_device`)
CASES = ([Case(m, "v5e-8") for m in ("qwen3-0.6b", "qwen2.5-1.5b", "qwen3.5-2b")]
         + [Case("qwen3-0.6b", "v6e-8")]
         + [Case(m, "v5p-16") for m in ("qwen3.5-4b", "qwen2.5-7b", "qwen3-8b")]
         + [Case("qwen3-0.6b", "v5e-8", work=dataclasses.replace(
             PAPERS, rows=32, micro_batches=4, prompt=1536, sampler_rows=32)),
            Case("qwen3.5-2b", "v6e-8"), Case("qwen2.5-1.5b", "v5p-16"),
            Case("qwen3-0.6b", "v5e-8", work=dataclasses.replace(PAPERS, head_per_device=True))])
PARTS = {"learner": ("learner step",), "sampler": ("sampler prefill", "sampler turn")}


def setup_of(case: Case) -> tpu_compile.Setup:
    return tpu_compile.Setup(case.model, plan.model_config(case.model),
                             topology.parse_slice(case.slice), case.mesh, case.work)


def measure(case: Case) -> dict:
    """The compiler's numbers of every program of `case` (bytes per device)."""
    compiled = tpu_compile.compile_setup(setup_of(case))
    return {"programs": {p.name: {**dataclasses.asdict(p), "peak": p.peak}
                         for p in compiled.programs},
            "state": compiled.state}


def measure_sampler(case: Case) -> dict:
    """The compiler's numbers of the sampler's programs of `case` (bytes per device)."""
    setup = setup_of(case)
    mesh = tpu_compile.sampler_mesh(setup, topology.devices(setup.slice))
    return {p.name: {**dataclasses.asdict(p), "peak": p.peak}
            for p in tpu_compile.sampler_programs(setup, mesh)}


def planned(case: Case) -> dict[str, float]:
    """The plan's bytes per device of the learner, the sampler and the step ("total")."""
    setup = setup_of(case)
    lines = plan.plan(setup.cfg, setup.mesh, setup.slice.chips, setup.work,
                      hosts=setup.slice.hosts)
    return {"learner": sum(lines[n] for n in plan.LEARNER_LINES),
            "sampler": sum(lines[n] for n in plan.SAMPLER_LINES), "step": lines["total"]}


def held(case: Case, part: str, limit: int) -> dict:
    """Whether the compiler fits `part`'s programs in `limit` bytes per device when held to it.

    A program's memory analysis (`temp_size_in_bytes`) counts more than the compiler holds to
    the chip's memory, and the compiler spends memory it has to spare (bench/RESULTS.md, "What
    the compiler's temporaries count"); so where the analysis exceeds the plan, this is the
    test of the plan: the compiler itself, given only the plan's figure."""
    setup = setup_of(case)
    devices = topology.devices(setup.slice)
    if part == "learner":
        programs = [tpu_compile.learner_program(setup, build_mesh(setup.mesh, devices),
                                                limit)[0]]
    else:
        programs = tpu_compile.sampler_programs(
            setup, tpu_compile.sampler_mesh(setup, devices), limit)
    return {"limit": limit, "fits": not any(p.exhausted for p in programs),
            "programs": {p.name: dataclasses.asdict(p) for p in programs}}


def compare(case: Case, measured: dict) -> dict:
    """Plan / compiler for the learner, the sampler and the step, from the recorded numbers.

    "{part}_ratio" is plan / the compiler's memory analysis. "{part}_checked" is the same with
    the analysis replaced by the plan's own figure where the compiler, held to that figure,
    fitted the program in it (`held`): what the band is checked on. "{part}_live" is plan / the
    compiler's own peak of live bytes (None where not recorded)."""
    setup = setup_of(case)
    planned_bytes = planned(case)
    programs = measured["programs"]
    analysed = {part: max(programs[n]["peak"] for n in names) for part, names in PARTS.items()}
    fitted = held_to_plan(measured, planned_bytes)
    confirmed = {part: min(analysed[part], planned_bytes[part]) if part in fitted
                 else analysed[part] for part in PARTS}
    live = {part: max(programs[n].get("live", 0) for n in names) for part, names in PARTS.items()}
    reshard = programs["learner -> sampler"]

    def step(memory: dict[str, int], resharded: int) -> int:
        return max(memory["learner"], measured["state"] + max(memory["sampler"], resharded))

    resharded = reshard["output"] + reshard["temp"]
    analysed["step"], confirmed["step"] = step(analysed, resharded), step(confirmed, resharded)
    live["step"] = step(live, reshard.get("live", 0) - reshard["argument"])
    row = {"case": case.key, "chip": setup.slice.family}
    for part in ("learner", "sampler", "step"):
        row[f"{part}_gib"] = analysed[part] / plan.GiB
        row[f"{part}_ratio"] = planned_bytes[part] / analysed[part]
        row[f"{part}_checked"] = planned_bytes[part] / confirmed[part]
        row[f"{part}_live"] = planned_bytes[part] / live[part] if all(live.values()) else None
    return {**row, "held": sorted(fitted),
            "compiler_fits": plan.fits(analysed["step"], setup.slice.family),
            "plan_fits": plan.fits(planned_bytes["step"], setup.slice.family),
            "exhausted": any(p["exhausted"] for p in programs.values())}


def held_to_plan(measured: dict, planned_bytes: dict[str, float]) -> set[str]:
    """The parts the compiler fitted when held to the plan's figure as it is now, or less."""
    return {part for part, record in measured.get("held", {}).items()
            if record["fits"] and record["limit"] <= planned_bytes[part]}


def short(case: Case, measured: dict) -> list[str]:
    """The parts whose memory analysis exceeds the plan and that were not yet held to it."""
    row = compare(case, measured)
    return [part for part in PARTS if row[f"{part}_ratio"] < 1.0 and part not in row["held"]]


def in_band(row: dict, part: str) -> bool:
    """Whether the plan of `part` is within its band: at least what the compiler needs (its
    memory analysis, or the plan's figure where held to it), at most `plan.BAND` times it; to
    four decimals, as the plan leaves out the learner state's counters and key (24 bytes)."""
    return 1.0 <= round(row[f"{part}_checked"], 4) <= plan.BAND


HELD_NOTE = ("\\* The compiler's memory analysis counts more than the plan; held to the "
             "plan's figure, the compiler fits the program(s) in it.")


LIVE_NOTE = ("Live peak: the compiler's own peak of live bytes per device "
             "(`peak_memory_in_bytes`), arguments included; at these sizes at or below its memory "
             "analysis, and about what it needs when held to a smaller figure "
             "(bench/RESULTS.md).")


def _ratio(row: dict, part: str) -> str:
    ratio = row[f"{part}_ratio"]
    return f"{ratio:.2f}{' *' if ratio < 1.0 and in_band(row, part) else ''}"


def table(rows: list[dict]) -> str:
    lines = [("| model, slice, mesh, rows x tokens | learner GiB | plan / compiler | "
              "sampler GiB | plan / compiler | step GiB | plan / compiler | plan / live peak "
              "(learner, sampler, step) | fits (compiler, plan) |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        verdict = f"{'yes' if r['compiler_fits'] else 'no'}, {'yes' if r['plan_fits'] else 'no'}"
        live = ", ".join("-" if r[f"{part}_live"] is None else f"{r[f'{part}_live']:.2f}"
                         for part in ("learner", "sampler", "step"))
        lines.append(f"| {r['case']} | {r['learner_gib']:.2f} | {_ratio(r, 'learner')} | "
                     f"{r['sampler_gib']:.2f} | {_ratio(r, 'sampler')} | {r['step_gib']:.2f} | "
                     f"{_ratio(r, 'step')} | {live} | {verdict} |")
    return "\n".join([*lines, "", HELD_NOTE, "", LIVE_NOTE])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="cases whose key contains this")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--report", action="store_true", help="only rebuild the table")
    mode.add_argument("--redo-sampler", action="store_true",
                      help="compile the sampler's programs again for the recorded setups")
    args = parser.parse_args(argv)
    recorded = json.loads(RESULTS.read_text())["results"] if RESULTS.exists() else {}
    recorded = recorded.get("measured", {}) if isinstance(recorded, dict) else {}
    cases = [c for c in CASES if args.only in c.key]
    for case in cases:
        if args.report:
            continue
        record = recorded.get(case.key)
        if record is None:
            record = recorded[case.key] = measure(case)
        elif args.redo_sampler:
            record["programs"].update(measure_sampler(case))
            record.get("held", {}).pop("sampler", None)
        elif not short(case, record):
            continue
        limits = planned(case)
        for part in short(case, record):
            record.setdefault("held", {})[part] = held(case, part, int(limits[part]))
        print(case.key, json.dumps(compare(case, record)), flush=True)
        save(recorded, [])
    rows = [compare(c, recorded[c.key]) for c in CASES if c.key in recorded]
    body = table(rows)
    print(body)
    save(recorded, rows)
    report.write("plan", "Memory planner vs the TPU compiler (`bench/plan.py`)", MACHINE, body,
                 {"measured": recorded, "comparison": rows})


def save(recorded: dict, rows: list[dict]) -> None:
    """The measurements so far, in `report.write`'s layout."""
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": MACHINE, "results": {
        "measured": recorded, "comparison": rows}}, indent=1))


if __name__ == "__main__":
    main()
