"""tpu.plan: the exact lines (params, optimizer, KV cache) against the arrays the learner and
the sampler really allocate, the presets against the checkpoints' published sizes, and the
command line."""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import pytest

from models import qwen
from prover_jax.learner import Learner, LearnerConfig
from tests.tpu.test_mesh import CONFIGS
from tpu import plan
from tpu.mesh import AXES, LEARNER_RULES, MeshConfig, build_mesh

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake CPU) devices")


def shard_bytes(tree) -> int:
    """Bytes of one device's shards of abstract arrays with shardings."""
    return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
               for x in jax.tree.leaves(tree))


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("mesh", [MeshConfig(fsdp=4, model=2), MeshConfig(data=2, model=4)],
                         ids=["fsdp4-model2", "data2-model4"])
def test_state_lines_are_the_learner_state_shards(name, mesh):
    cfg = CONFIGS[name]
    state = Learner(cfg, LearnerConfig(), build_mesh(mesh)).abstract_state()
    lines = plan.plan(cfg, mesh, 8, plan.Workload(rows=16, micro_batches=2))
    assert lines["params"] == shard_bytes(state.params)
    adam = state.opt_state[1][0]
    assert lines["optimizer"] == shard_bytes((adam.mu, adam.nu))
    assert lines["gradients"] == 2 * lines["params"]  # the sum and one micro-batch's


def test_reference_line_is_the_trainers_kl_reference():
    """With a KL penalty the trainer keeps the starting weights in the compute dtype, placed as
    the learner's params; the plan counts them beside the learner and beside the sampler."""
    from prover_jax.trainer import reference_policy

    cfg, mesh = CONFIGS["qwen3"], MeshConfig(fsdp=4, model=2)
    learner = Learner(cfg, LearnerConfig(compute_dtype="bfloat16"), build_mesh(mesh))
    reference = reference_policy(learner, qwen.init(cfg, jax.random.key(0)))
    work = plan.Workload(rows=16, micro_batches=2)
    without, with_reference = (plan.plan(cfg, mesh, 8, work),
                               plan.plan(cfg, mesh, 8, plan.Workload(rows=16, micro_batches=2,
                                                                     reference=True)))
    assert without["reference"] == 0
    assert with_reference["reference"] == shard_bytes(reference) == with_reference["compute copy"]
    learner_total = sum(with_reference[n] for n in plan.LEARNER_LINES)
    rollout_total = sum(with_reference[n] for n in plan.STATE_LINES + plan.SAMPLER_LINES)
    assert with_reference["total"] == max(learner_total, rollout_total)
    assert with_reference["total"] == without["total"] + with_reference["reference"]


@pytest.mark.parametrize("staleness", [1, 2])
def test_asynchronous_updates_hold_the_sampler_beside_the_learner(staleness):
    """With the rollouts `staleness` updates ahead, the sampler runs while the learner trains:
    the total is both phases' lines at once, with a sampler copy of every version the
    rollouts may still be given (`prover_jax.ahead.Ahead`: the one sampling and those
    offered since)."""
    cfg, mesh = CONFIGS["qwen3"], MeshConfig(fsdp=4, model=2)
    work = plan.Workload(rows=16, micro_batches=2)
    synchronous = plan.plan(cfg, mesh, 8, work)
    ahead = plan.plan(cfg, mesh, 8, dataclasses.replace(work, staleness=staleness))
    assert ahead["sampler copy"] == (staleness + 1) * synchronous["sampler copy"]
    assert ahead["total"] == (sum(ahead[n] for n in plan.LEARNER_LINES)
                              + sum(ahead[n] for n in plan.SAMPLER_LINES))
    assert ahead["total"] > synchronous["total"]
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        plan.Workload(staleness=-1)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cache_line_is_the_sampler_cache(name):
    cfg = CONFIGS[name]
    work = plan.Workload(rows=4, micro_batches=1, prompt=20, response=12, sampler_rows=4,
                         turn_tokens=8)
    cache = qwen.init_cache(cfg, 4, 20 + 8 + 12, jnp.bfloat16)  # prompt, a turn, a reply
    arrays = (cache.k, cache.v, cache.history, cache.state)
    assert plan.plan(cfg, MeshConfig(), 8, work)["kv cache"] == sum(x.nbytes for x in arrays)


def test_presets_have_the_published_sizes():
    counts = {name: plan.param_elements(plan.model_config(name), LEARNER_RULES,
                                        dict.fromkeys(AXES, 1)) for name in plan.PRESETS}
    assert round(counts["qwen2.5-1.5b"] / 1e9, 2) == 1.54
    assert round(counts["qwen2.5-7b"] / 1e9, 2) == 7.62
    assert round(counts["qwen3-0.6b"] / 1e9, 2) == 0.60
    assert round(counts["qwen3-8b"] / 1e9, 1) == 8.2
    assert 1.5e9 < counts["qwen3.5-2b"] < 2.5e9 and 3.5e9 < counts["qwen3.5-4b"] < 4.5e9
    assert plan.model_config("qwen3.5-4b").num_full == 8  # every fourth layer


def test_sharding_divides_what_it_shards():
    cfg, work = plan.model_config("qwen2.5-7b"), plan.Workload()
    single = plan.plan(cfg, MeshConfig(fsdp=1), 1, work)
    eight = plan.plan(cfg, MeshConfig(fsdp=-1), 8, work)
    assert eight["optimizer"] == pytest.approx(single["optimizer"] / 8, rel=1e-3)
    assert single["gathered weights"] == 0 < eight["gathered weights"]
    assert eight["sampler copy"] == single["sampler copy"]  # replicated over the batch axes


def test_fit_follows_the_chip():
    cfg = plan.model_config("qwen3-8b")
    total = plan.plan(cfg, MeshConfig(fsdp=-1), 8, plan.Workload())["total"]
    assert plan.fits(total, "v5p") and not plan.fits(total, "v5e")


def test_command_line(capsys):
    assert plan.main(["--model", "qwen2.5-1.5b", "--mesh", "fsdp=-1", "--devices", "4",
                      "--chip", "v5e", "--rows", "32", "--micro-batches", "4"]) == 0
    out = capsys.readouterr().out
    assert "1,543,714,304 parameters" in out and "| total |" in out and "| v5e (16 GiB" in out
    assert plan.main(["--model", "qwen2.5-1.5b", "--mesh", "fsdp=2", "--devices", "8"]) == 0
    assert plan.main(["--model", "qwen2.5-1.5b", "--mesh", "fsdp=3", "--devices", "8"]) == 2
    assert "128 rows do not split into 8 micro-batches x 3" in capsys.readouterr().err
    assert plan.main(["--model", "qwen2.5-1.5b", "--mesh", "fsdp=16", "--devices", "8"]) == 2
    assert "needs 16 devices" in capsys.readouterr().err
    assert plan.main(["--model", "no-such-model"]) == 2
    assert "neither a preset" in capsys.readouterr().err


def verdicts(out: str) -> dict[str, list[str]]:
    """The table's chip lines: first cell -> [remat, no remat]."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in out.splitlines() if line.startswith("| ")]
    return {row[0]: row[1:] for row in rows if row[0].split(" (")[0] in plan.CHIPS}


def test_command_line_says_whether_it_fits_every_chip(capsys):
    args = ["--model", "qwen3-8b", "--mesh", "fsdp=-1", "--devices", "8"]
    assert plan.main(args) == 0
    lines = verdicts(capsys.readouterr().out)
    # GiB: 32, 16, 95, 32; H100 80e9 / 2**30 = 74.5 and H200 141e9 / 2**30 = 131.3
    assert list(lines) == ["v4 (32 GiB, 90% usable)", "v5e (16 GiB, 90% usable)",
                           "v5p (95 GiB, 90% usable)", "v6e (32 GiB, 90% usable)",
                           "h100 (75 GiB, 90% usable)", "h200 (131 GiB, 90% usable)"]
    cfg = plan.model_config("qwen3-8b")
    totals = [plan.plan(cfg, MeshConfig(fsdp=-1), 8, plan.Workload(remat=remat))["total"]
              for remat in (True, False)]
    for line, chip in zip(lines.values(), plan.CHIPS):
        assert line == ["fits" if plan.fits(total, chip) else "does not fit" for total in totals]
    assert plan.main([*args, "--chip", "v5e"]) == 1  # fits no chip asked about
    assert list(verdicts(capsys.readouterr().out)) == ["v5e (16 GiB, 90% usable)"]


def test_the_plan_is_within_its_band_of_the_tpu_compiler():
    """Every preset's learner, sampler and step lines against the TPU compiler's memory of the
    same programs, as `bench/plan.py` recorded it (bench/results/plan.json): the plan may not
    promise less than the compiler needs, nor more than `plan.BAND` times it. Where the
    compiler's memory analysis counts more than the plan, the compiler was held to the plan's
    figure and fitted the programs in it; no line is below 0.8 of the analysis even so, nor
    below the compiler's own peak of live bytes."""
    from bench import plan as bench_plan

    recorded = json.loads((bench_plan.RESULTS).read_text())["results"]["measured"]
    cases = [case for case in bench_plan.CASES if case.key in recorded]
    assert {case.model for case in cases} == set(plan.PRESETS)
    assert len({case.slice for case in cases}) >= 3
    outside = []
    for case in cases:
        row = bench_plan.compare(case, recorded[case.key])
        assert not bench_plan.short(case, recorded[case.key]), case.key  # all held, if short
        for part, record in recorded[case.key].get("held", {}).items():
            assert record["limit"] == int(bench_plan.planned(case)[part])
        for part in ("learner", "sampler", "step"):
            ratio = row[f"{part}_ratio"]
            assert ratio >= 0.8, (case.key, part, ratio)
            assert row[f"{part}_live"] >= 1.0, (case.key, part)  # the compiler's own peak
            if not bench_plan.in_band(row, part):
                outside.append((case.key, part, row[f"{part}_checked"]))
    assert not outside


def test_every_flag_says_what_it_is_and_nothing_fitting_is_an_error(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    plan.add_workload_flags(parser)
    flags = [action for action in parser._actions if action.dest != "help"]
    assert len(flags) == len(dataclasses.fields(plan.Workload))
    assert all(action.help for action in flags)
    assert plan.main(["--model", "qwen3-8b", "--devices", "8", "--chip", "v5e"]) == 1
    assert "fits no chip of v5e" in capsys.readouterr().err
    assert plan.main(["--model", "qwen3-8b", "--devices", "8", "--chip", "v5p"]) == 0


def test_a_model_that_is_not_the_recipes_architecture_is_named():
    plan.check_architecture(plan.model_config("qwen3-8b"), "qwen3-8b")
    with pytest.raises(ValueError, match=r"written for qwen3-8b.*num_layers 28 \(not 36\)"):
        plan.check_architecture(plan.model_config("qwen3-0.6b"), "qwen3-8b")
