"""Every program of a training step compiled for a Cloud TPU slice, on a machine without one:
``python -m tpu.compile --model qwen3-8b --topology v5p-64 --micro-batches 4``.

The TPU compiler runs ahead of time on the devices `tpu.topology` describes (libtpu, the
``tpu`` extra), for abstract inputs: no weights, no TPU, nothing downloaded. A step runs:
- the learner's train step (`prover_jax.learner.Learner`, the LM head on every token: its
  largest program);
- the learner -> sampler reshard (`tpu.mesh.to_sampler`);
- the sampler's prefill of the groups' shared prompts (`kv_cache.prefill_rows`) and a turn's
  generation (`sampler.compiled_generate`: the new tokens prefilled, then decoding), under the
  sampler's sharding: weights split over "model" and replicated over the batch axes, the cache's
  rows over the batch axes (`tpu.mesh.cache_shardings`). On a slice of several hosts every host
  samples its own rows with its own copy of the weights on its first chip (`to_sampler`), so the
  sampler compiles for one chip and a host's rows.

For each it prints the compiler's per-device memory (arguments, outputs, temporaries, donated
aliases, and its own peak of live bytes), the collectives in the compiled HLO, and the
planner's lines beside it (`tpu.plan`). A step's peak is the larger of two phases: the
learner's step, and the rollout (the learner's state, which stays resident, plus the sampler's
largest program). It fits when that peak is within `tpu.plan.HEADROOM` of the chip's memory.
The compiler spends memory it has to spare, and its memory analysis counts more than it needs,
so where it puts a phase above the chip, that phase's programs are compiled again held to the
memory they will have (`held_to_chip`, the compiler's `hbm_limit`), and the step fits if they
all do. When it does not fit, the nearest setup the planner expects to fit (remat, more
micro-batches, a model split, fewer sampler rows) is compiled and shown too.

Time: analytic FLOPs (`tpu.roofline`: matmuls, 2 per multiply-add) against the chip's published
bf16 peak and HBM bandwidth (`tpu.roofline.CHIPS`) give a roofline lower bound on the learner
step's time and the sampler turn's, and so an upper bound on MFU. The compiler's own
``cost_analysis`` counts a scanned loop's body once, so it is not the step's FLOPs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from tpu import plan, roofline, topology
from tpu.mesh import LEARNER_RULES, SAMPLER_RULES
from tpu.mesh_config import AXES, BATCH_AXES, MeshConfig, parse

GiB = 2**30
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
               "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = (.+?) ((?:"
                          + "|".join(COLLECTIVES) + r")(?:-start)?)\(", re.MULTILINE)
_ARRAY = re.compile(r"\b(" + "|".join(DTYPE_BYTES) + r")\[([\d,]*)\]")


@dataclasses.dataclass(frozen=True)
class Setup:
    """What to compile: a model, a slice, a mesh over all its chips and a workload."""

    model: str  # a preset or a model folder (for the report)
    cfg: object  # models.qwen.QwenConfig
    slice: topology.Slice
    mesh: MeshConfig = dataclasses.field(default_factory=lambda: MeshConfig(fsdp=-1))
    work: plan.Workload = dataclasses.field(default_factory=plan.Workload)

    def __post_init__(self):
        sizes = self.sizes
        if math.prod(sizes.values()) != self.slice.chips:
            raise ValueError(f"mesh {self.mesh.describe()} uses {math.prod(sizes.values())} of "
                             f"{self.slice.chips} chips; every chip must take part")
        if self.slice.hosts > 1 and sizes["model"] > 1:
            raise ValueError(f"mesh {self.mesh.describe()}: on {self.slice.hosts} hosts each "
                             f"samples with a whole copy of the weights, so model must be 1")
        plan.check_split(self.work, sizes)
        if self.slice.hosts > 1 and self.work.sampler_rows % self.slice.hosts:
            raise ValueError(f"{self.work.sampler_rows} sampler rows do not split over "
                             f"{self.slice.hosts} hosts")

    @property
    def sizes(self) -> dict[str, int]:
        return self.mesh.shape(self.slice.chips)

    @property
    def chip(self) -> roofline.Chip:
        return roofline.CHIPS[self.slice.family]

    def learner_config(self):
        from prover_jax.learner import LearnerConfig

        w = self.work
        return LearnerConfig(micro_batches=w.micro_batches, compute_dtype=w.compute_dtype,
                             remat=w.remat, logits_chunk=w.logits_chunk,
                             recompute_logits=w.recompute_logits, head_buckets=1,
                             head_per_device=w.head_per_device)

    def describe(self) -> str:
        w = self.work
        return (f"{self.model} on {self.slice.accelerator_type} ({self.slice.topology_name}, "
                f"{self.slice.chips} chips, {self.slice.hosts} host"
                f"{'s' if self.slice.hosts > 1 else ''}), mesh {self.mesh.describe()}; "
                f"learner {w.rows} rows x {w.length} tokens in {w.micro_batches} micro-batches, "
                f"{w.compute_dtype}{', remat' if w.remat else ''}"
                f"{', head per device' if w.head_per_device else ''}"
                f"{', a KL reference beside it' if w.reference else ''}; "
                f"sampler {w.sampler_rows} rows "
                f"({w.sampler_rows // w.group_size} prompts of {w.prompt} tokens, turns of "
                f"{w.turn_tokens} + {w.response} tokens), {w.sampler_dtype}")


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled program's per-device memory (bytes) and collectives."""

    name: str
    argument: int
    output: int
    alias: int
    temp: int
    collectives: dict[str, tuple[int, int]]  # op -> (count in the HLO, bytes of their outputs)
    seconds: float  # compile time
    exhausted: int = 0  # bytes the compiler needed when it ran out of memory (0: it did not)
    live: int = 0  # the compiler's own peak of live bytes (`peak_memory_in_bytes`; 0: none)
    collective_arrays: tuple[str, ...] = ()  # distinct arrays they produce: "bf16[8,64,1024]"

    @property
    def peak(self) -> int:
        """Arguments + outputs - donated aliases + temporaries (or what the compiler said it
        needed when it ran out of memory)."""
        return self.exhausted or self.argument + self.output - self.alias + self.temp


def collectives(hlo: str) -> dict[str, tuple[int, int]]:
    """op -> (how many, bytes of their results) over a compiled module's text, async starts
    counted once (a loop body's collectives appear once however often it runs)."""
    found = {op: [0, 0] for op in COLLECTIVES}
    for op, arrays in _collective_results(hlo):
        found[op][0] += 1
        found[op][1] += sum(DTYPE_BYTES[dtype] * math.prod(int(n) for n in dims.split(",") if n)
                            for dtype, dims in arrays)
    return {op: (count, size) for op, (count, size) in found.items()}


def collective_arrays(hlo: str) -> tuple[str, ...]:
    """The distinct arrays ("dtype[dims]") the collectives of a compiled module's text
    produce, sorted: whose data a collective moves, by its shape."""
    return tuple(sorted({f"{dtype}[{dims}]" for _, arrays in _collective_results(hlo)
                         for dtype, dims in arrays}))


def _collective_results(hlo: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(op without "-start", its results' (dtype, dims)) of every collective in the text."""
    found = []
    for shape, op in _INSTRUCTION.findall(hlo):
        base = op.removesuffix("-start")
        arrays = _ARRAY.findall(shape)
        if op.endswith("-start") and base in ("all-gather", "collective-permute"):
            arrays = arrays[-1:]  # (operand, result, ...): the result is the last array
        found.append((base, arrays))
    return found


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_EXHAUSTED = (re.compile(r"Used ([\d.]+)([KMGT]?) of [\d.]+[KMGT]? hbm"),
              re.compile(r"HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM"))


def needed_bytes(message: str) -> int | None:
    """What a TPU compiler's out-of-memory error says the program needed (or, in its other
    wording, its temporaries alone), in bytes; None for any other error."""
    for pattern in _EXHAUSTED:
        found = pattern.search(message)
        if found is not None:
            return int(float(found.group(1)) * _UNITS[found.group(2)])
    return None


def held_to(hbm_limit: int | None) -> dict[str, str]:
    """The TPU compiler's options that hold a program to `hbm_limit` bytes of HBM per device
    (None: the chip's own)."""
    return {} if hbm_limit is None else {"xla_tpu_max_hbm_size_mib": str(hbm_limit // 2**20)}


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def progress(name: str, every_s: float = 30.0, echo=to_stderr):
    """Says (on stderr) that `name` is compiling, every `every_s` seconds how long it has run,
    and how long it took."""
    start, done = time.perf_counter(), threading.Event()

    def tick():
        while not done.wait(every_s):
            echo(f"  still compiling {name}: {time.perf_counter() - start:.0f} s")

    echo(f"compiling {name} ...")
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        echo(f"  {name}: {time.perf_counter() - start:.0f} s")


def _program(name: str, lowered, hbm_limit: int | None = None) -> Program:
    import jax

    start = time.perf_counter()
    try:
        with progress(name):
            compiled = lowered.compile(compiler_options=held_to(hbm_limit))
    except jax.errors.JaxRuntimeError as error:
        needed = needed_bytes(str(error))
        if needed is None:
            raise
        return Program(name, 0, 0, 0, 0, dict.fromkeys(COLLECTIVES, (0, 0)),
                       time.perf_counter() - start, needed)
    seconds = time.perf_counter() - start
    stats, hlo = compiled.memory_analysis(), compiled.as_text()
    return Program(name, stats.argument_size_in_bytes, stats.output_size_in_bytes,
                   stats.alias_size_in_bytes, stats.temp_size_in_bytes, collectives(hlo),
                   seconds, live=stats.peak_memory_in_bytes,
                   collective_arrays=collective_arrays(hlo))


def _abstract(tree, shardings):
    import jax

    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        tree, shardings)


def shard_bytes(tree) -> int:
    """Bytes one device holds of a pytree of sharded ShapeDtypeStructs (the largest shard)."""
    import jax
    import numpy as np

    return sum(math.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
               for x in jax.tree.leaves(tree))


def abstract_train_batch(rows: int, length: int, sharding):
    """A TrainBatch of ShapeDtypeStructs: `rows` x `length` tokens, rows placed by
    `sharding`."""
    import jax
    import jax.numpy as jnp

    from prover_jax import Batch
    from prover_jax.learner import TrainBatch

    def spec(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    grid = (rows, length)
    batch = Batch(spec(grid, jnp.int32), spec(grid, jnp.bool_), spec(grid, jnp.int32),
                  spec(grid[:1], jnp.int32), spec(grid[:1], jnp.float32),
                  spec((rows, 1), jnp.bool_))
    return TrainBatch(batch, spec(grid, jnp.float32), spec(grid, jnp.float32))


def learner_program(setup: Setup, mesh, hbm_limit: int | None = None) -> tuple[Program, int]:
    """The compiled train step (held to `hbm_limit` bytes per device, if given), and the bytes
    per device of the state it keeps."""
    from prover_jax.learner import Learner
    from tpu.mesh import row_sharding

    learner = Learner(setup.cfg, setup.learner_config(), mesh)
    state = learner.abstract_state()
    batch = abstract_train_batch(setup.work.rows, setup.work.length, row_sharding(mesh))
    lowered = learner.compiled_step(None).lower(state, batch)
    return _program("learner step", lowered, hbm_limit), shard_bytes(state)


def reshard_program(setup: Setup, mesh, hbm_limit: int | None = None) -> Program:
    """The learner -> sampler weight reshard (`to_sampler`), held to `hbm_limit` bytes per
    device, if given."""
    import jax

    from models import qwen
    from models.qwen.sharding import param_shardings

    params = _abstract(qwen.abstract(setup.cfg),
                       param_shardings(setup.cfg, mesh, LEARNER_RULES))
    dtype = setup.work.sampler_dtype

    def move(params):  # the cast, then the move, as one program
        return jax.tree.map(lambda p: p.astype(dtype), params)

    reshard = jax.jit(move, out_shardings=param_shardings(setup.cfg, mesh, SAMPLER_RULES))
    return _program("learner -> sampler", reshard.lower(params), hbm_limit)


def sampler_mesh(setup: Setup, devices: Sequence):
    """The sampler's mesh: the learner's on one host; one chip per host on several."""
    from tpu.mesh import build_mesh

    if setup.slice.hosts == 1:
        return build_mesh(setup.mesh, devices)
    return build_mesh(MeshConfig(), devices[:1])


def sampler_programs(setup: Setup, mesh, hbm_limit: int | None = None) -> list[Program]:
    """A host's prefill of its groups' prompts and one turn of generation (each held to
    `hbm_limit` bytes per device, if given)."""
    import jax
    import jax.numpy as jnp

    from models import qwen
    from models.qwen import kv_cache, sampler
    from models.qwen.sharding import param_shardings
    from tpu.mesh import cache_shardings, row_sharding

    w = setup.work
    rows = w.sampler_rows // setup.slice.hosts
    prompts = max(1, rows // w.group_size)
    dtype = jnp.dtype(w.sampler_dtype)
    platform = mesh.devices.flat[0].platform
    params = _abstract(qwen.abstract(setup.cfg, dtype),
                       param_shardings(setup.cfg, mesh, SAMPLER_RULES))
    cache = jax.eval_shape(functools.partial(kv_cache.empty, setup.cfg, rows,
                                             plan.cache_slots(w), dtype, platform=platform))
    cache = _abstract(cache, cache_shardings(cache, mesh))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def spec(shape, dtype, sharding=replicated):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    def placed(count: int):  # rows over the batch axes where they divide, as ModelPolicy does
        shards = math.prod(mesh.shape[a] for a in BATCH_AXES)
        return row_sharding(mesh) if count % shards == 0 else replicated

    prompt = (prompts, w.prompt)
    prefill = kv_cache.prefill_rows.lower(
        params, setup.cfg, cache, spec(prompt, jnp.int32, placed(prompts)),
        spec(prompt, jnp.int32, placed(prompts)), spec((rows,), jnp.int32, placed(rows)))
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), rows))
    turn = (rows, w.turn_tokens)
    generate = sampler.compiled_generate.lower(
        params, setup.cfg, spec(turn, jnp.int32, placed(rows)),
        spec(turn, jnp.int32, placed(rows)), cache, spec(keys.shape, keys.dtype, placed(rows)),
        max_tokens=w.response,
        max_new_tokens=spec((), jnp.int32), stop_tokens=spec((1,), jnp.int32),
        temperature=spec((), jnp.float32), top_k=spec((), jnp.int32),
        top_p=spec((), jnp.float32), pad_id=0)
    return [_program("sampler prefill", prefill, hbm_limit),
            _program("sampler turn", generate, hbm_limit)]


@dataclasses.dataclass(frozen=True)
class Report:
    """A compiled setup: its programs, the learner's resident state and the planner's lines."""

    setup: Setup
    programs: tuple[Program, ...]
    state: int  # bytes per device of the learner's state (params, AdamW moments)
    planned: dict[str, float]
    held: tuple[Program, ...] = ()  # compiled again, held to the memory each has (`held_to_chip`)

    def program(self, name: str) -> Program:
        return next(p for p in self.programs if p.name == name)

    @property
    def reference(self) -> int:
        """Bytes per device of the KL reference's weights (`plan.Workload.reference`), resident
        beside every program: the plan's line, exact from the shard shapes."""
        return int(self.planned["reference"])

    @property
    def learner_peak(self) -> int:
        return self.program("learner step").peak + self.reference

    @property
    def sampler_peak(self) -> int:
        """The sampler's largest program (its weights and cache are among its arguments)."""
        return max(p.peak for p in self.programs if p.name.startswith("sampler"))

    @property
    def rollout_peak(self) -> int:
        reshard = self.program("learner -> sampler")
        return (self.state + self.reference
                + max(self.sampler_peak, reshard.output + reshard.temp))

    @property
    def peak(self) -> int:
        return max(self.learner_peak, self.rollout_peak)

    @property
    def usable(self) -> int:
        """Bytes per device a step may fill: `plan.HEADROOM` of the chip's memory."""
        return int(plan.HEADROOM * self.setup.chip.hbm_bytes)

    @property
    def analysis_fits(self) -> bool:
        """Whether the memory analysis's peak is within the chip's usable memory."""
        return plan.fits(self.peak, self.setup.slice.family)

    @property
    def fits(self) -> bool:
        """By the memory analysis, or, where it counts more than the chip has, by every program
        compiled held to the memory it will have (`held_to_chip`)."""
        held_fits = bool(self.held) and not any(p.exhausted for p in self.held)
        return self.analysis_fits or held_fits


def compile_setup(setup: Setup, devices: Sequence | None = None) -> Report:
    """Compiles every program of `setup` for its slice (devices: `topology.devices` of it)."""
    from tpu.mesh import build_mesh

    devices = topology.devices(setup.slice) if devices is None else list(devices)
    mesh = build_mesh(setup.mesh, devices)
    learner, state = learner_program(setup, mesh)
    programs = (learner, reshard_program(setup, mesh),
                *sampler_programs(setup, sampler_mesh(setup, devices)))
    planned = plan.plan(setup.cfg, setup.mesh, setup.slice.chips, setup.work,
                        hosts=setup.slice.hosts)
    return Report(setup, programs, state, planned)


def held_to_chip(report: Report, devices: Sequence | None = None) -> Report:
    """`report` with the programs of each phase its memory analysis puts above the chip compiled
    again, held to the memory they will have there: `plan.HEADROOM` of it for the learner's
    step; that less the learner's resident state for the rollout's (the reshard, whose
    arguments are that state's params, and the sampler's programs, which run beside it). The
    memory analysis counts more than the compiler needs (bench/RESULTS.md), so a step it puts
    above the chip may still fit: this asks the compiler."""
    from tpu.mesh import build_mesh

    setup = report.setup
    devices = topology.devices(setup.slice) if devices is None else list(devices)
    usable = report.usable - report.reference
    beside = usable - report.state
    if beside <= 0:
        return report
    mesh = build_mesh(setup.mesh, devices)
    held = ()
    if not plan.fits(report.learner_peak, setup.slice.family):
        held += (learner_program(setup, mesh, usable)[0],)
    if not plan.fits(report.rollout_peak, setup.slice.family):
        reshard = report.program("learner -> sampler")
        held += (reshard_program(setup, mesh, beside + reshard.argument),
                 *sampler_programs(setup, sampler_mesh(setup, devices), beside))
    return dataclasses.replace(report, held=held)


def fitted_report(setup: Setup) -> Report:
    """`compile_setup`, and where its memory analysis puts a phase above the chip,
    `held_to_chip`: the report the fit is decided on."""
    report = compile_setup(setup)
    return report if report.analysis_fits else held_to_chip(report)


def estimates(setup: Setup) -> dict[str, float]:
    """Roofline figures of the learner step and one sampler turn (see the module docstring)."""
    w, cfg, chip, chips = setup.work, setup.cfg, setup.chip, setup.slice.chips
    sizes = setup.sizes
    params = plan.param_elements(cfg, LEARNER_RULES, dict.fromkeys(AXES, 1))
    local = plan.param_elements(cfg, LEARNER_RULES, sizes)
    compute = plan.DTYPE_BYTES[w.compute_dtype]
    train = roofline.train_flops(cfg, w.rows, w.length, w.remat)
    useful = roofline.train_flops(cfg, w.rows, w.length, False)
    # every micro-batch reads the (gathered) weights in its forward, backward (and remat)
    # passes; AdamW reads params, gradients and both moments and writes three of them
    passes = 3 + w.remat
    learner_bytes = (w.micro_batches * passes * compute * params / sizes["model"]
                     + 7 * 4 * local)
    learner_s = roofline.roofline(train / chips, learner_bytes, chip)
    hosts = setup.slice.hosts
    sampler_chips = 1 if hosts > 1 else chips
    rows = w.sampler_rows // hosts
    lines = plan.plan(cfg, setup.mesh, chips, w, hosts)  # one sampler chip's weights and cache
    weights, cache = lines["sampler copy"], lines["kv cache"]
    context = w.prompt + w.turn_tokens + w.response / 2
    decode = roofline.decode_flops(cfg, rows, context)
    decode_s = roofline.roofline(decode / sampler_chips, weights + cache, chip)
    prefill = roofline.forward_flops(cfg, rows * w.turn_tokens, w.prompt + w.turn_tokens / 2,
                                     head_tokens=rows)
    turn_s = roofline.roofline(prefill / sampler_chips, weights, chip) + w.response * decode_s
    return {"learner_flops": train, "learner_s": learner_s,
            "learner_mfu": roofline.mfu(useful, learner_s, chip, chips),
            "learner_tokens_per_s": w.rows * w.length / learner_s,
            "decode_step_s": decode_s, "decode_tokens_per_s": rows * hosts / decode_s,
            "decode_mfu": roofline.mfu(decode, decode_s, chip, sampler_chips),
            "turn_s": turn_s}


def _memory_lines(report: Report, unit: str, size: int) -> list[str]:
    """Each program's memory, then the compiler against the plan."""
    def amount(n: float) -> str:
        return f"{n / size:.2f}"

    planned = report.planned
    lines = [(f"| program | arguments | outputs | aliased | temporaries | peak {unit} / device "
              "| live peak | compile s |"), "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in report.programs:
        memory = ("out of memory | | |" if p.exhausted else
                  f"{amount(p.argument)} | {amount(p.output)} | {amount(p.alias)} | "
                  f"{amount(p.temp)}")
        live = amount(p.live) if p.live else ""
        lines.append(f"| {p.name} | {memory} | {amount(p.peak)} | {live} | {p.seconds:.0f} |")
    pairs = {"learner step": (report.learner_peak,
                              sum(planned[n] for n in plan.LEARNER_LINES)),
             "sampler (largest program)": (report.sampler_peak,
                                           sum(planned[n] for n in plan.SAMPLER_LINES)),
             "step peak (learner, or state + sampler)": (report.peak, planned["total"])}
    lines += ["", f"| per device ({unit}) | compiler | plan | plan / compiler |",
              "|---|---:|---:|---:|"]
    lines += [f"| {name} | {amount(ours)} | {amount(theirs)} | {theirs / ours:.2f} |"
              for name, (ours, theirs) in pairs.items()]
    detail = ", ".join(f"{name} {amount(value)}" for name, value in planned.items()
                       if name != "total")
    return [*lines, "", f"plan lines ({unit}): {detail}"]


def _collective_lines(report: Report, unit: str, size: int) -> list[str]:
    """Per program: how many of each collective, and their results' size."""
    lines = [f"| collectives (count in the HLO, result {unit}) | {' | '.join(COLLECTIVES)} |",
             "|---|" + "---:|" * len(COLLECTIVES)]
    for p in report.programs:
        cells = [f"{count} ({size_ / size:.2f})" if count else "-"
                 for count, size_ in (p.collectives[op] for op in COLLECTIVES)]
        lines.append(f"| {p.name} | {' | '.join(cells)} |")
    return lines


def _roofline_lines(setup: Setup) -> list[str]:
    chip, e = setup.chip, estimates(setup)
    return [(f"roofline ({chip.name}: {chip.peak_flops / 1e12:.0f} TFLOP/s bf16, "
             f"{chip.hbm_bandwidth / 1e9:.0f} GB/s HBM per chip; lower bounds on time):"),
            (f"- learner step: {e['learner_flops'] / 1e15:.1f} PFLOP, >= {e['learner_s']:.2f} s, "
             f"<= {e['learner_tokens_per_s']:,.0f} tokens/s, MFU <= {e['learner_mfu']:.0%}"),
            (f"- sampler decode step: >= {e['decode_step_s'] * 1e3:.2f} ms, "
             f"<= {e['decode_tokens_per_s']:,.0f} tokens/s (all hosts), "
             f"MFU <= {e['decode_mfu']:.1%}"),
            (f"- sampler turn ({setup.work.turn_tokens} new + {setup.work.response} generated "
             f"tokens per row): >= {e['turn_s']:.2f} s")]


def render(report: Report) -> str:
    """The report as markdown: memory per program against the plan, the verdict, collectives,
    roofline."""
    chip = report.setup.chip
    unit, size = ("GiB", GiB) if report.peak >= GiB else ("MiB", 2**20)
    verdict = (f"**{'fits' if report.fits else 'does NOT fit'}**: peak "
               f"{report.peak / GiB:.2f} GiB of {report.usable / GiB:.2f} GiB usable "
               f"({plan.HEADROOM:.0%} of {chip.name}'s {chip.hbm_bytes / GiB:.2f} GiB)"
               f"{_held_words(report)}")
    return "\n".join([report.setup.describe(), "", *_memory_lines(report, unit, size), "",
                      verdict, "", *_collective_lines(report, unit, size), "",
                      *_roofline_lines(report.setup)])


def _held_words(report: Report) -> str:
    if not report.held:
        return ""
    names = [p.name for p in report.held]
    rollout = ("" if names == ["learner step"] else f"; the rollout's "
               f"{(report.usable - report.state) / GiB:.2f} GiB beside the learner's state")
    held_to = f"held to the memory each has there ({', '.join(names)}{rollout})"
    short = [f"{p.name} needs {p.exhausted / GiB:.2f} GiB" for p in report.held if p.exhausted]
    if short:
        return f"; {held_to}, the compiler runs out of memory: {', '.join(short)}"
    return (f"; the memory analysis counts more than the compiler needs: {held_to}, it fits "
            "every program")


def candidates(setup: Setup) -> Iterator[Setup]:
    """Setups near `setup` that use less memory per device, nearest first: remat, then more
    micro-batches, then a model split (one host), then fewer sampler rows (each with the
    changes before it)."""
    w, work = setup.work, setup.work
    if not w.remat:
        work = dataclasses.replace(work, remat=True)
        yield dataclasses.replace(setup, work=work)
    shards = math.prod(setup.sizes[a] for a in BATCH_AXES)
    micro = [m for m in (2, 4, 8, 16, 32, 64) if m > work.micro_batches
             and work.rows % (m * shards) == 0]
    for m in micro:
        yield dataclasses.replace(setup, work=dataclasses.replace(work, micro_batches=m))
    deepest = dataclasses.replace(work, micro_batches=micro[-1]) if micro else work
    splits = [m for m in (2, 4, 8) if setup.slice.hosts == 1 and setup.slice.chips % m == 0
              and setup.cfg.num_kv_heads % m == 0 and m > setup.sizes["model"]]
    for model in splits:
        mesh = MeshConfig(fsdp=-1, model=model)
        rows = math.prod(mesh.shape(setup.slice.chips)[a] for a in BATCH_AXES)
        ok = [m for m in (deepest.micro_batches, *micro) if work.rows % (m * rows) == 0]
        if ok:
            yield dataclasses.replace(setup, mesh=mesh, work=dataclasses.replace(
                deepest, micro_batches=ok[0]))
    rows = work.sampler_rows
    hosts = setup.slice.hosts
    while rows % 2 == 0 and rows // 2 >= work.group_size and (rows // 2) % hosts == 0:
        rows //= 2
        yield dataclasses.replace(setup, work=dataclasses.replace(deepest, sampler_rows=rows))


def nearest_fit(setup: Setup) -> Setup | None:
    """The first of `candidates` the planner expects to fit, or None."""
    for candidate in candidates(setup):
        try:
            planned = plan.plan(candidate.cfg, candidate.mesh, candidate.slice.chips,
                                candidate.work, hosts=candidate.slice.hosts)
        except ValueError:
            continue
        if plan.fits(planned["total"], candidate.slice.family):
            return candidate
    return None


def check(setup: Setup, echo=print) -> Report:
    """Compiles `setup` and prints its report; when it does not fit, also the nearest setup the
    planner expects to fit, compiled as well. Returns `setup`'s report."""
    report = fitted_report(setup)
    echo(render(report))
    if report.fits:
        return report
    suggestion = nearest_fit(setup)
    echo("\n" + suggested(suggestion) + ("; compiled:\n" if suggestion else ""))
    if suggestion is not None:
        echo(render(compile_setup(suggestion)))
    return report


def suggested(suggestion: Setup | None) -> str:
    """`nearest_fit`'s answer in words."""
    if suggestion is None:
        return "no nearby setup fits: use a larger slice or a smaller model"
    return (f"suggested instead: mesh {suggestion.mesh.describe()}, "
            f"{suggestion.work.micro_batches} micro-batches, remat {suggestion.work.remat}, "
            f"{suggestion.work.sampler_rows} sampler rows")


def setup_from_config(path: str, model: str | None, accelerator: str,
                      overrides: Sequence[str] = ()) -> Setup:
    """The Setup of a training config (YAML) on a slice: its mesh, learner settings, groups x
    group size rows and sampling lengths. The model: `model` (a preset or folder), else the
    config's ``init`` folder or run directory where it is on disk, else its ``architecture``
    (a recipe's preset), else its tiny model (a config that names no model of its own).

    The learner's length is ``sampling.max_context``; when the config leaves it to the model,
    the papers' 2,560 tokens (`plan.Workload`).
    """
    from models import qwen
    from prover_jax import runs
    from prover_jax.config import load
    from prover_jax.run_settings import TrainConfig

    config = load(TrainConfig, path, list(overrides))
    on_disk = config.init is not None and Path(config.init).expanduser().exists()
    if model is not None:
        name, cfg = model, plan.model_config(model)
    elif on_disk:
        init = Path(config.init).expanduser()
        name, cfg = config.init, plan.model_config(str(init / runs.MODEL if runs.is_run(init)
                                                       else init))
    elif config.architecture is not None:
        name, cfg = config.architecture, plan.model_config(config.architecture)
    elif config.init is not None:
        raise ValueError(f"{path}: its init {config.init} is not on this machine, and it names "
                         "no architecture: pass --model PRESET_OR_FOLDER")
    else:
        shape = config.tiny
        name = "the config's tiny model"
        cfg = qwen.QwenConfig(model_type="qwen3", vocab_size=shape.vocab_size,
                              hidden_size=shape.hidden_size,
                              intermediate_size=shape.intermediate_size,
                              num_layers=shape.layers, num_heads=shape.heads,
                              num_kv_heads=shape.kv_heads, head_dim=shape.head_dim, qk_norm=True)
    learner, sampling = config.learner, config.sampling
    length = sampling.max_context or plan.Workload().length
    rows = config.groups * config.group_size
    work = plan.Workload(rows=rows, micro_batches=learner.micro_batches,
                         prompt=length - sampling.max_new_tokens,
                         response=sampling.max_new_tokens, sampler_rows=rows,
                         group_size=config.group_size, compute_dtype=learner.compute_dtype,
                         sampler_dtype=sampling.dtype,
                         remat=learner.remat, logits_chunk=learner.logits_chunk,
                         recompute_logits=learner.recompute_logits,
                         head_per_device=learner.head_per_device,
                         reference=learner.loss.kl_coef > 0,
                         staleness=config.asynchronous.max_staleness)
    return Setup(name, cfg, topology.parse_slice(accelerator), config.mesh, work)


class Verdict(NamedTuple):
    """`preflight`'s answer: whether the setup fits, and if not, what would (`suggested`)."""

    fits: bool
    instead: str = ""


def preflight(config: str, accelerator: str, model: str | None = None,
              overrides: Sequence[str] = (), echo=print) -> Verdict:
    """Whether a training config fits a slice, before renting it (`tpu.launch up`): decided by
    the plan where its calibration decides it (`plan.decided`: seconds), else by `check`'s
    compile (minutes)."""
    setup = setup_from_config(config, model, accelerator, overrides)
    total = plan.plan(setup.cfg, setup.mesh, setup.slice.chips, setup.work,
                      hosts=setup.slice.hosts)["total"]
    decided = plan.decided(total, setup.slice.family)
    usable = plan.HEADROOM * plan.CHIPS[setup.slice.family]
    echo(f"{setup.describe()}\nplan: {total / GiB:.2f} GiB per chip of {usable / GiB:.2f} "
         "usable: " + {True: "fits, with the compiler anywhere in the plan's calibration band "
                             "(not compiled)",
                       False: "cannot fit, with the compiler anywhere in the plan's "
                              "calibration band (not compiled)",
                       None: "compiling to decide"}[decided])
    if decided is None:
        report = check(setup, echo)
        return Verdict(True) if report.fits else Verdict(False, suggested(nearest_fit(setup)))
    if decided:
        return Verdict(True)
    instead = suggested(nearest_fit(setup))
    echo(instead)
    return Verdict(False, instead)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu.compile",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--topology", required=True,
                        help="a Cloud TPU slice: v5e-8, v5p-32, v6e-8, v4-32, v5p-128, ... or "
                             "a JAX topology such as v5e:2x4")
    parser.add_argument("--model", help=f"a preset ({', '.join(plan.PRESETS)}) or a model folder")
    parser.add_argument("--config", help="a training config (YAML): its mesh, learner, groups "
                                         "and sampling lengths (the flags below are ignored)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of --config, as prover_jax.train takes it")
    parser.add_argument("--mesh", default="fsdp=-1", help="axis sizes, e.g. fsdp=-1,model=2")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the setup and print it; compile nothing")
    plan.add_workload_flags(parser)
    args = parser.parse_args(argv)
    if args.config is None and args.model is None:
        parser.error("give --model, or --config (whose init or tiny model is then compiled)")
    try:
        if args.config is not None:
            setup = setup_from_config(args.config, args.model, args.topology, args.set)
        else:
            setup = Setup(args.model, plan.model_config(args.model),
                          topology.parse_slice(args.topology), parse(args.mesh),
                          plan.workload_from_flags(args))
    except (ValueError, OSError) as error:
        parser.error(str(error))
    if args.dry_run:
        print(f"dry run: would compile {setup.describe()}")
        return 0
    report = check(setup)
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(report), indent=2) + "\n")
    return 0 if report.fits else 1


def to_json(report: Report) -> dict:
    """The report's numbers (bytes per device, seconds) as plain JSON."""
    setup = report.setup
    return {"setup": setup.describe(), "model": setup.model,
            "topology": setup.slice.topology_name, "mesh": setup.mesh.describe(),
            "work": dataclasses.asdict(setup.work),
            "programs": {p.name: {**dataclasses.asdict(p), "peak": p.peak}
                         for p in report.programs},
            "state": report.state, "plan": report.planned, "learner_peak": report.learner_peak,
            "sampler_peak": report.sampler_peak, "peak": report.peak, "fits": report.fits,
            "held": {p.name: dataclasses.asdict(p) for p in report.held},
            "estimates": estimates(setup)}


if __name__ == "__main__":
    sys.exit(main())
