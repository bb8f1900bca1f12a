"""tpu.compile and tpu.topology: the TPU compiler run ahead of time on slices without a TPU.

Needs libtpu (the ``tpu`` extra, installed by the test extras); the CPU backend stays the
default, so the rest of the suite is unchanged. Small Qwen3 and Qwen3.5 models compile for a
one-host v5e slice, and a small Qwen3 for a four-host v5e slice: the programs take the TPU
path, the weights are sharded as the rules say (the compiler's argument bytes equal the
planner's exact lines), and the memory stays within the planner's band.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import pytest

from models import qwen
from models.qwen import deltanet, kv_cache, sampler
from models.qwen.sharding import param_shardings
from tests.tpu.test_mesh import CONFIGS
from tpu import compile as tpu_compile
from tpu import plan, topology
from tpu.mesh import SAMPLER_RULES, MeshConfig, build_mesh

pytest.importorskip("libtpu", reason="needs the tpu extra (libtpu) to compile for TPU")

# Small, in the TPU's tiles: head dim, widths and vocabulary in multiples of 128 (the compiler
# pads an array's last two dimensions to (8, 128) tiles, which would swamp a 16-wide model)
SMALL = {
    "qwen3": qwen.QwenConfig(model_type="qwen3", vocab_size=2048, hidden_size=256,
                             intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2,
                             head_dim=128, qk_norm=True),
    "qwen3_5": qwen.QwenConfig(
        model_type="qwen3_5", vocab_size=2048, hidden_size=256, intermediate_size=512,
        num_layers=2, num_heads=4, num_kv_heads=2, head_dim=128, qk_norm=True,
        partial_rotary_factor=0.25, attn_output_gate=True, norm_plus_one=True,
        layer_types=("linear_attention", "full_attention"), linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel=4),
}
WORK = plan.Workload(rows=16, micro_batches=2, prompt=224, response=32, sampler_rows=16,
                     group_size=2, turn_tokens=32)


@pytest.mark.parametrize(("name", "family", "shape", "hosts", "gcloud"), [
    ("v5e-8", "v5e", (2, 4), 1, "v5litepod-8"),
    ("v5litepod-16", "v5e", (4, 4), 4, "v5litepod-16"),
    ("v6e-8", "v6e", (2, 4), 1, "v6e-8"),
    ("v4-32", "v4", (2, 2, 4), 4, "v4-32"),  # 32 TensorCores, 16 chips
    ("v5p-32", "v5p", (2, 2, 4), 4, "v5p-32"),
    ("v5p-128", "v5p", (4, 4, 4), 16, "v5p-128"),
    ("v5p:2x4x4", "v5p", (2, 4, 4), 8, "v5p-64"),
])
def test_slice_names(name, family, shape, hosts, gcloud):
    spec = topology.parse_slice(name)
    assert (spec.family, spec.shape, spec.hosts, spec.accelerator_type) == (
        family, shape, hosts, gcloud)


@pytest.mark.parametrize(("name", "error"), [
    ("v7x-8", "FAMILY-COUNT"), ("v5p-12", "power of two"), ("v4-7", "multiple"),
    ("v5e:2x2x2", "2 dimensions"), ("v5p-2", "start at 4 chips")])
def test_bad_slice_names_say_why(name, error):
    with pytest.raises(ValueError, match=error):
        topology.parse_slice(name)


def test_devices_are_the_slices_chips_and_hosts():
    devices = topology.devices("v5p-16")  # 2x2x2: two hosts of 2x2x1
    assert len(devices) == 8 and {d.platform for d in devices} == {"tpu"}
    assert sorted({d.process_index for d in devices}) == [0, 1]
    assert jax.default_backend() == "cpu"  # compiling for a TPU leaves the backend alone


def lowered_generate(cfg, devices):
    """`compiled_generate` lowered for abstract params and cache on a mesh of `devices`."""
    mesh = build_mesh(MeshConfig(fsdp=-1), devices)
    params = tpu_compile._abstract(qwen.abstract(cfg), param_shardings(cfg, mesh, SAMPLER_RULES))
    platform = devices[0].platform
    cache = jax.eval_shape(lambda: kv_cache.empty(cfg, 4, 24, platform=platform))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    cache = tpu_compile._abstract(cache, jax.tree.map(lambda _: replicated, cache))

    def spec(shape, dtype=jnp.int32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=replicated)

    key = jax.eval_shape(lambda: jax.random.key(0))
    return sampler.compiled_generate.lower(
        params, cfg, spec((4, 8)), spec((4, 8)), cache, spec((), key.dtype), max_tokens=8,
        max_new_tokens=spec(()), stop_tokens=spec((1,)), temperature=spec((), jnp.float32),
        top_k=spec(()), top_p=spec((), jnp.float32))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_program_for_tpu_takes_the_tpu_path(name):
    cfg = CONFIGS[name]
    on_cpu = lowered_generate(cfg, jax.devices()[:4]).as_text()
    on_tpu = lowered_generate(cfg, topology.devices("v5e:2x2")).as_text()
    # XLA:CPU's layouts: the per-layer weights, the head's transposed copy and keys-major
    # scores behind optimization barriers; none of that on TPU
    assert "optimization_barrier" in on_cpu
    assert "optimization_barrier" not in on_tpu
    assert on_tpu.count("stablehlo.while") == on_cpu.count("stablehlo.while")


def delta_rule_live_bytes(rows: int, chips: int) -> int:
    """The TPU compiler's peak of live bytes per chip of the chunked delta rule over `rows`
    rows of 512 tokens and 8 heads, the rows split over `chips` chips of a v5e slice."""
    mesh = build_mesh(MeshConfig(fsdp=-1), topology.devices("v5e-8")[:chips])
    over_rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(mesh.axis_names))

    def spec(*shape):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=over_rows)

    qkv = spec(rows, 512, 8, 128)
    lowered = jax.jit(lambda *x: deltanet.chunked(*x)[0]).lower(
        qkv, qkv, qkv, spec(rows, 512, 8), spec(rows, 512, 8), spec(rows, 8, 128, 128))
    return lowered.compile().memory_analysis().peak_memory_in_bytes


def test_rows_split_over_chips_cost_each_chip_only_its_own_rows():
    # The triangular solve's batch had the rows as its largest axis: the compiler laid it
    # along the TPU's 128 lanes, where 4 rows per chip were padded to 128 (3.2x the memory)
    assert delta_rule_live_bytes(32, chips=8) == delta_rule_live_bytes(4, chips=1)


@pytest.fixture(scope="module", params=[
    ("qwen3", "v5e:2x2", MeshConfig(fsdp=2, model=2), WORK),
    # one 64-token chunk of the delta rule: compiling for TPU takes about 20 s per chunk (the
    # scan over chunks is compiled by test_rows_split_over_chips_cost_each_chip_only_its_own_rows)
    ("qwen3_5", "v5e:2x2", MeshConfig(fsdp=-1), dataclasses.replace(WORK, prompt=32)),
    ("qwen3", "v5e-16", MeshConfig(fsdp=-1), dataclasses.replace(WORK, rows=32, sampler_rows=32)),
], ids=["qwen3-v5e-2x2-tensor-parallel", "qwen3_5-v5e-2x2", "qwen3-v5e-16-four-hosts"])
def report(request):
    name, topology_name, mesh, work = request.param
    setup = tpu_compile.Setup(name, SMALL[name], topology.parse_slice(topology_name), mesh,
                              work)
    return tpu_compile.compile_setup(setup)


def test_every_program_compiles_with_the_planned_shardings(report):
    planned, setup = report.planned, report.setup
    # the learner's state is exactly the params and AdamW moments sharded by the rules
    assert report.state == pytest.approx(planned["params"] + planned["optimizer"], rel=0.01)
    # a turn's arguments: the sampler's weights (split over "model", whole on a sampler host),
    # its cache (rows over the batch axes) and small inputs, each padded to the TPU's tiles
    turn = report.program("sampler turn")
    exact = planned["sampler copy"] + planned["kv cache"]
    assert exact <= turn.argument <= 1.01 * exact
    if setup.sizes["model"] > 1:
        replicated = plan.param_elements(setup.cfg, SAMPLER_RULES, {"data": 1, "fsdp": 1,
                                                                    "model": 1})
        assert planned["sampler copy"] < replicated * 2  # bf16, and split two ways
        assert turn.collectives["all-reduce"][0] > 0  # tensor parallel: partial sums combined
    learner = report.program("learner step")
    assert learner.collectives["all-gather"][0] > 0  # FSDP gathers each layer's weights
    if setup.sizes["model"] == 1:
        # ... and never a micro-batch's activations: each chip computes on its own rows (the
        # Gated DeltaNet's conv scatter, indexed by row number, had every row's inputs
        # gathered). The embedding lookup gathers every row's token ids (integers); with a
        # "model" axis it gathers the rows' embeddings instead of the table, the cheaper way
        # when the vocabulary outnumbers the tokens.
        rows = f"[{setup.work.rows // setup.work.micro_batches},{setup.work.length},"
        assert not [a for a in learner.collective_arrays
                    if rows in a and a.startswith(("bf16", "f32"))]
    assert learner.alias > 0.9 * report.state  # the state is donated and updated in place


# Models this small keep less than the plan's per-token internals, score copies and cache
# copies (the compiler fuses them away at these sizes): the plan is conservative here by up
# to ~4x. The
# papers' scale is held to `plan.BAND` against the TPU compiler's recorded numbers
# (tests/tpu/test_plan.py::test_the_plan_is_within_its_band_of_the_tpu_compiler).
SMALL_MODEL_BAND = 4.0


def test_memory_within_the_plans_band(report):
    learner = sum(report.planned[name] for name in plan.LEARNER_LINES)
    sampler_lines = sum(report.planned[name] for name in plan.SAMPLER_LINES)
    assert 1.0 <= learner / report.learner_peak <= SMALL_MODEL_BAND
    assert 1.0 <= sampler_lines / report.sampler_peak <= SMALL_MODEL_BAND
    assert 1.0 <= report.planned["total"] / report.peak <= SMALL_MODEL_BAND
    assert report.fits
    text = tpu_compile.render(report)
    assert "**fits**" in text and "| learner step |" in text and "MFU <=" in text


def test_the_command_line_checks_the_setup_it_is_given_and_writes_its_report(
        report, monkeypatch, tmp_path, capsys):
    """`main` builds the Setup its flags say, checks it (`check`: here the fixture's compiled
    report stands in for compiling it again) and writes the report's numbers as JSON."""
    checked = []
    monkeypatch.setattr(plan, "model_config", lambda name: report.setup.cfg)
    monkeypatch.setattr(tpu_compile, "check", lambda setup: checked.append(setup) or report)
    setup, out = report.setup, tmp_path / "report.json"
    work = []
    for field in dataclasses.fields(setup.work):
        flag, value = field.name.replace("_", "-"), getattr(setup.work, field.name)
        work += ([f"--{flag}" if value else f"--no-{flag}"] if isinstance(value, bool)
                 else [f"--{flag}", str(value)])
    assert tpu_compile.main([
        "--model", "small", "--topology", setup.slice.topology_name, "--mesh",
        ",".join(f"{axis}={size}" for axis, size in setup.sizes.items()), *work,
        "--json", str(out)]) == 0
    assert [(s.slice, s.sizes, s.work) for s in checked] == [
        (setup.slice, setup.sizes, setup.work)]
    written = json.loads(out.read_text())
    assert written["fits"] and written["peak"] == report.peak
    assert set(written["programs"]) == {p.name for p in report.programs}
    assert written["programs"]["learner step"]["temp"] == report.program("learner step").temp
    assert {"learner_s", "learner_mfu", "decode_tokens_per_s"} <= set(written["estimates"])


def test_where_the_analysis_is_above_the_chip_the_compiler_is_held_to_it(monkeypatch):
    """Where the memory analysis puts a phase of the step above the chip's usable memory (here
    the rollout, forced), its programs are compiled again held to the memory they will have
    (`hbm_limit`): what the learner's state leaves of the usable memory. On a real v5e chip
    they fit, so the step fits; with 1 MiB beside the state, each runs out of memory and says
    how much it needed."""
    setup = tpu_compile.Setup("qwen3", SMALL["qwen3"], topology.parse_slice("v5e:2x2"),
                              MeshConfig(fsdp=-1), WORK)
    report = tpu_compile.compile_setup(setup)
    learner = report.program("learner step")
    assert learner.live >= learner.argument  # its own peak of live bytes holds the arguments
    assert report.rollout_peak > report.learner_peak
    monkeypatch.setattr(plan, "fits", lambda total, chip: total <= report.learner_peak)
    held = tpu_compile.held_to_chip(report)
    assert not held.analysis_fits and held.fits
    assert [p.name for p in held.held] == ["learner -> sampler", "sampler prefill",
                                           "sampler turn"]
    assert "**fits**" in tpu_compile.render(held)
    assert "it fits every program" in tpu_compile.render(held)

    monkeypatch.setattr(plan, "HEADROOM", (report.state + 2**20) / setup.chip.hbm_bytes)
    short = tpu_compile.held_to_chip(report)
    assert not short.fits and all(p.exhausted > 2**20 and p.temp == 0 for p in short.held)
    assert "runs out of memory: learner -> sampler needs" in tpu_compile.render(short)


def test_collectives_are_read_from_the_hlo():
    hlo = """
  %all-gather-start.1 = (bf16[8,256]{1,0}, bf16[32,256]{1,0}) all-gather-start(%p), dims={0}
  %all-gather-done.1 = bf16[32,256]{1,0} all-gather-done(%all-gather-start.1)
  ROOT %all-reduce.2 = (f32[4]{0}, f32[2,2]{1,0}) all-reduce(%a, %b), to_apply=%add
  %reduce-scatter = f32[16]{0} reduce-scatter(%c), dimensions={0}
"""
    found = tpu_compile.collectives(hlo)
    assert found["all-gather"] == (1, 32 * 256 * 2)
    assert found["all-reduce"] == (1, (4 + 4) * 4)
    assert found["reduce-scatter"] == (1, 16 * 4)
    assert found["all-to-all"] == (0, 0)
    assert tpu_compile.collective_arrays(hlo) == ("bf16[32,256]", "f32[16]", "f32[2,2]", "f32[4]")


def test_suggestions_fit_by_the_plan():
    cfg = plan.model_config("qwen2.5-1.5b")
    setup = tpu_compile.Setup("qwen2.5-1.5b", cfg, topology.parse_slice("v5e-8"),
                              MeshConfig(fsdp=-1), plan.Workload(remat=False, micro_batches=1))
    assert not plan.fits(plan.plan(cfg, setup.mesh, 8, setup.work)["total"], "v5e")
    suggestion = tpu_compile.nearest_fit(setup)
    # remat alone leaves the papers' 128 rows in one micro-batch too large; two fit
    assert (suggestion.work.remat, suggestion.work.micro_batches) == (True, 2)
    assert plan.fits(plan.plan(cfg, suggestion.mesh, 8, suggestion.work)["total"], "v5e")
    nearer = list(tpu_compile.candidates(setup))
    assert nearer.index(suggestion) == min(
        i for i, c in enumerate(nearer)
        if plan.fits(plan.plan(cfg, c.mesh, 8, c.work)["total"], "v5e"))


def test_a_config_becomes_a_setup(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("groups: 4\ngroup_size: 4\nsampling:\n  max_new_tokens: 64\n"
                      "  max_context: 512\n  dtype: bfloat16\nlearner:\n  micro_batches: 2\n"
                      "  remat: true\nmesh:\n  fsdp: -1\nasynchronous:\n  max_staleness: 1\n")
    setup = tpu_compile.setup_from_config(str(config), "qwen3-0.6b", "v5e-8")
    assert (setup.work.rows, setup.work.micro_batches, setup.work.length) == (16, 2, 512)
    assert setup.work.staleness == 1
    assert (setup.work.response, setup.work.sampler_dtype, setup.work.group_size) == (
        64, "bfloat16", 4)
    assert setup.sizes == {"data": 1, "fsdp": 8, "model": 1}
    with pytest.raises(ValueError, match="model must be 1"):
        dataclasses.replace(setup, slice=topology.parse_slice("v5e-16"),
                            mesh=MeshConfig(fsdp=-1, model=2))
    assert math.prod(setup.sizes.values()) == 8


def test_command_line_errors_name_the_problem(capsys):
    with pytest.raises(SystemExit) as raised:
        tpu_compile.main(["--topology", "v5e-8"])
    assert raised.value.code == 2 and "give --model, or --config" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tpu_compile.main(["--topology", "v9-8", "--model", "qwen3-0.6b"])
    assert "FAMILY-COUNT" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tpu_compile.main(["--topology", "v5e-16", "--model", "qwen3-0.6b", "--mesh",
                          "fsdp=-1,model=2"])
    assert "model must be 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the papers' 128 rows over 32 chips, 8 micro-batches
        tpu_compile.main(["--topology", "v5p-64", "--model", "qwen3-8b"])
    assert ("128 rows do not split into 8 micro-batches x 32 batch shards (the mesh's data, "
            "fsdp axes): use 1, 2 or 4 micro-batches (4 rows per batch shard), or rows a "
            "multiple of 256") in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tpu_compile.main(["--topology", "v5p-64", "--model", "qwen3-8b", "--rows", "32",
                          "--micro-batches", "2"])
    assert "use 1 micro-batch (1 row per batch shard), or rows a multiple of 64" in (
        capsys.readouterr().err)


def test_out_of_memory_messages_say_what_was_needed():
    assert tpu_compile.needed_bytes(
        "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 20.5G of 15.48G hbm. "
        "Exceeded hbm capacity by 5.0G.") == int(20.5 * 2**30)
    assert tpu_compile.needed_bytes(
        "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
        "temporaries (28.68G) exceeds available HBM (15.75G).") == int(28.68 * 2**30)
    assert tpu_compile.needed_bytes("INVALID_ARGUMENT: something else") is None


def test_a_recipe_is_planned_as_the_architecture_it_names(tmp_path):
    """A recipe names its model's preset: planned and compiled before any weights are on disk,
    never as the tiny default model; a KL penalty plans its reference beside the learner."""
    recipe = "configs/recipes/vict-qwen3-8b-tau-retail.yaml"
    setup = tpu_compile.setup_from_config(recipe, None, "v5p-8")
    assert setup.model == "qwen3-8b" and setup.cfg == plan.model_config("qwen3-8b")
    assert setup.work.reference  # its kl_coef is 0.01
    missing = tmp_path / "run.yaml"
    missing.write_text(f"init: {tmp_path / 'not-downloaded'}\n")
    with pytest.raises(ValueError, match="names no architecture: pass --model"):
        tpu_compile.setup_from_config(str(missing), None, "v5e-8")
    tiny = tpu_compile.setup_from_config("configs/tiny-cpu.yaml", None, "v5e-8",
                                         ["mesh.fsdp=-1"])
    assert tiny.model == "the config's tiny model" and not tiny.work.reference


@pytest.mark.parametrize("accelerator,fits", [("v5litepod-8", False), ("v5p-8", True)])
def test_preflight_decides_by_the_plan_without_compiling(accelerator, fits, monkeypatch):
    """Qwen3-8B's recipe on v5e-8 (the plan is far above the chip) and on a v5p-8 whose chips
    it fills by little (the plan is far below): both decided in the plan's calibration band,
    the compiler never called; a refusal names what would fit, or says that nothing near does."""
    def compiled(*args, **kwargs):
        raise AssertionError("compiled a setup the plan decides")

    monkeypatch.setattr(tpu_compile, "compile_setup", compiled)
    said = []
    verdict = tpu_compile.preflight("configs/recipes/vict-qwen3-8b-tau-retail.yaml",
                                    accelerator, None, (), said.append)
    assert verdict.fits == fits
    assert "not compiled" in said[0]
    if not fits:
        assert verdict.instead.startswith(("suggested instead: mesh", "no nearby setup fits"))


def test_the_calibration_band_decides_only_what_no_compiler_in_it_could_change():
    usable = plan.HEADROOM * plan.CHIPS["v5e"]
    assert plan.decided(usable * plan.PLAN_OVER_ANALYSIS_MIN, "v5e") is True
    assert plan.decided(usable * plan.PLAN_OVER_ANALYSIS_MIN * 1.01, "v5e") is None
    assert plan.decided(usable * plan.PLAN_OVER_LIVE_MAX, "v5e") is None
    assert plan.decided(usable * plan.PLAN_OVER_LIVE_MAX * 1.01, "v5e") is False


def test_the_band_holds_every_recorded_compile():
    """`plan.decided`'s bounds hold every plan / compiler ratio bench/plan.py and
    bench/topologies.py recorded: the plan never below PLAN_OVER_ANALYSIS_MIN of the memory
    analysis, nor above PLAN_OVER_LIVE_MAX of the live bytes."""
    from bench import plan as bench_plan

    rows = json.loads(bench_plan.RESULTS.read_text())["results"]["comparison"]
    for part in ("learner", "sampler", "step"):
        assert min(r[f"{part}_ratio"] for r in rows) >= plan.PLAN_OVER_ANALYSIS_MIN
        assert max(r[f"{part}_live"] for r in rows) <= plan.PLAN_OVER_LIVE_MAX
    topologies = json.loads((bench_plan.RESULTS.parent / "topologies.json").read_text())
    for record in topologies["results"].values():
        assert record["plan"]["total"] / record["peak"] >= plan.PLAN_OVER_ANALYSIS_MIN


def test_a_compile_says_what_it_compiles_and_for_how_long():
    said = []
    with tpu_compile.progress("learner step", every_s=0.05, echo=said.append):
        import time

        time.sleep(0.2)
    assert said[0] == "compiling learner step ..."
    assert any(line.startswith("  still compiling learner step: ") for line in said[1:-1])
    assert said[-1].startswith("  learner step: ") and said[-1].endswith(" s")
