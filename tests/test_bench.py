"""The benchmarks at tiny sizes: every pipeline runs (and the kernels match the reference)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest


def load_bench(name: str = "credit_kernels"):
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_credit_kernel_bench_runs_and_agrees():
    bench = load_bench()
    results = bench.run([128], repeats=1, ref_repeats=1, rounds=1)  # asserts ours == reference
    methods = {r["method"] for r in results[1:]}
    assert methods == set(bench.READS)
    assert all(r["ours_ms"] > 0 and r["floor_ms"] > 0 for r in results[1:])
    assert "| vict | 128 |" in bench.table(results)


def test_gigpo_paper_scale_bench_runs_our_side_against_the_reference():
    """Without verl-agent's file the bench times our side only; its advantages are checked
    against the per-row reference on the way."""
    bench = load_bench()
    row = bench.run_gigpo_paper(None, repeats=1, rounds=1)
    assert 3000 < row["steps"] < 5000 and row["ours_ms"] > row["ours_host_ms"] > 0
    assert "not run (--verl-agent)" in bench.gigpo_table(row)


def test_the_recorded_gigpo_comparison_is_the_one_the_docs_quote():
    root = Path(__file__).resolve().parents[1]
    recorded = json.loads((root / "bench" / "results" / "credit_kernels.json").read_text())
    row = recorded["results"]["gigpo_paper_scale"]
    assert row["speedup"] >= 150
    assert row["verl_agent_ms"] / row["ours_ms"] == pytest.approx(row["speedup"])
    quoted = f"{row['speedup']:.0f}x verl-agent's own implementation"
    assert quoted in (root / "README.md").read_text()
    assert f"{row['speedup']:.0f}x in this run" in (root / "bench" / "RESULTS.md").read_text()


def test_env_bench_runs():
    bench = load_bench("envs")
    results = bench.run(["household"], episodes=4)
    row = results[0]
    assert row["steps"] > 0 and row["steps_per_s"] > 0 and row["pool_steps_per_s"] > 0
    assert 0 < row["snapshot_restore_us"]
    assert "| household |" in bench.table(results)


def test_env_bench_times_restores_by_replay():
    bench = load_bench("envs")
    recorded = bench.record("alfworld-small", 3)
    cost = bench.replay_restore_ms("alfworld-small", recorded)
    assert set(cost) == {"live", "load"} and cost["live"][0] > 0
    assert all(n in bench.REPLAYED for n in cost["live"])
    row = {"env": "alfworld-small", "steps_per_s": 1.0, "snapshot_restore_us": 1.0,
           "pool_steps_per_s": 1.0, "replay_restore_ms": cost}
    assert "| alfworld-small, load | " in bench.table([row]).split("restore, 0 actions")[1]


def test_vict_overhead_bench_runs():
    bench = load_bench("vict_overhead")
    results = bench.run(["household"], groups=2)
    row = results[0]
    assert row["groups"] == 2 and row["actions"] > 0
    assert row["env_ms_per_group"] > 0 and row["vict_ms_per_group"] > 0
    assert "| household | 2 |" in bench.table(results)
    steps = bench.per_training_step()  # the comparison's committed GRPO records at least
    assert steps[0]["arm"] == "grpo" and 0 < steps[0]["credit_s"] < steps[0]["step_s"]
    assert "| grpo |" in bench.step_table(steps)


def test_prover_overhead_bench_runs():
    bench = load_bench("prover_overhead")
    row = bench.measure(groups=2, epsilon=0.8, judge="contrastive")
    assert row["own_steps"] > 0 and row["rollout_s"] > 0
    assert row["extra_steps"] >= 0 and "| 0.8 | contrastive | 2 |" in bench.table([row])


def test_rollout_bench_runs():
    bench = load_bench("rollout")
    rows = bench.run([2], model="tiny", tasks=2, group=1, max_new_tokens=4, rerun=(),
                     in_process=True)
    by_path = {r["path"]: r for r in rows}
    assert set(by_path) == {"re-prefill", "cache"}
    for r in rows:
        assert r["episodes"] == 2 and r["actions"] == 4 and r["overflows"] == 0
        assert r["wall_s"] > 0 and r["generated_per_s"] > 0 and r["peak_mib"] > 0
        assert r["prefilled_per_episode"] > 0 and 0 < r["generated"] <= 2 * 2 * 4
    # the second turn prefills only the observation block, not the whole stream again
    assert by_path["cache"]["prefilled"] < by_path["re-prefill"]["prefilled"]
    text = bench.table(rows)
    assert "| re-prefill | 2 |" in text and "| cache | 2 |" in text and "| 2 | " in text


def test_topologies_bench_reports_every_recorded_setup_as_compiled():
    """Every recorded setup is the one the bench defines (the same workload), its table line
    carries the compiler's numbers from the record, and the plan of its learner and sampler
    is at least the compiler's own peak of live bytes."""
    bench = load_bench("topologies")
    recorded = json.loads(bench.RESULTS.read_text())["results"]
    assert {name.split()[1] for name in recorded} == set(bench.SLICES)
    table = bench.table(recorded)
    for name, record in recorded.items():
        setup = bench.setup_of(bench.case_of(name))
        recorded_work = {**dataclasses.asdict(type(setup.work)()), **record["work"]}
        assert recorded_work == dataclasses.asdict(setup.work), name  # added fields: defaults
        assert record["topology"] == setup.slice.topology_name
        line = next(line for line in table.splitlines() if line.startswith(
            f"| {setup.model} | {name.split()[1]} ("))
        assert f"| {record['learner_peak'] / 2**30:.2f} | " in line
        assert f"| {record['peak'] / 2**30:.2f} of " in line
        ratios = bench.ratios(name, record)
        assert all(ratios[f"{part}_live"] >= 1.0 for part in bench.PARTS), (name, ratios)


def test_plan_bench_reports_from_its_recorded_measurements():
    """The table is rebuilt from the recorded compiler numbers (compiling a preset for TPU
    takes minutes; tests/tpu/test_compile.py compiles small models)."""
    bench = load_bench("plan")
    recorded = json.loads(bench.RESULTS.read_text())["results"]["measured"]
    case = next(c for c in bench.CASES if c.key in recorded)
    row = bench.compare(case, recorded[case.key])
    learner = recorded[case.key]["programs"]["learner step"]["peak"]
    assert row["learner_gib"] == learner / 2**30
    assert f"| {case.key} | {row['learner_gib']:.2f} | {row['learner_ratio']:.2f} |" in (
        bench.table([row]))


def test_server_bench_runs():
    bench = load_bench("server")
    shape = bench.TinyModel(vocab_size=256, hidden_size=32, layers=1, intermediate_size=64,
                            head_dim=8, tokenizer_episodes=5)
    rows = bench.run(requests=4, tokens=4, clients=(1, 2), shape=shape)
    assert [(r["mode"], r["clients"]) for r in rows] == [
        ("sequential", 1), ("sequential", 2), ("batched", 1), ("batched", 2),
        ("continuous", 1), ("continuous", 2)]
    assert all(r["requests_per_s"] > 0 and r["p95_s"] >= r["p50_s"] > 0 for r in rows)
    assert rows[1]["decodes"] == 4 and rows[3]["decodes"] <= 4  # one request a decode, or fewer
    assert rows[3]["joins"] == 0  # without joining, each request is in one decode's start
    assert 1 <= rows[5]["decodes"] + rows[5]["joins"] <= 4  # a request starts, shares or joins
    assert "| 2 | continuous |" in bench.table(rows)


def test_vict_diagnostics_bench_runs():
    bench = load_bench("vict_diagnostics")
    row = bench.measure("household", groups=2, epsilon=0.9)
    assert row["reconstruction"] == row["mutation"] == row["eligibility"] == 100.0
    assert row["atoms"] >= 3 and 0 <= row["sparsity"] <= 100 and 0 <= row["trigger"] <= 100
    lines = bench.tables([row]).splitlines()
    assert "| ALFWorld (paper) | | | 5.8 |" in lines[4] and lines[5].startswith("| household |")


def test_vict_diagnostics_results_are_the_recorded_runs():
    """bench/RESULTS.md's VICT tables are the committed JSON's, and every WebShop abstention
    there is an episode that bought nothing (its notes say so)."""
    bench = load_bench("vict_diagnostics")
    root = Path(bench.__file__).parent
    recorded = json.loads((root / "results" / "vict_diagnostics.json").read_text())["results"]
    assert bench.tables(recorded) in (root / "RESULTS.md").read_text()
    webshop = [row for row in recorded if row["env"] == "webshop"]
    assert webshop and all(row["abstain_declared"] == row["abstain"] > 0 for row in webshop)
    assert all(row["abstain_declared"] == 0 for row in recorded if row["env"] != "webshop")


@pytest.mark.slow
def test_device_bench_runs_tiny(tmp_path):
    bench = load_bench("device")
    bench.main(["--tiny", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "device.json").read_text())["results"]
    assert result["tiny"] and result["learner"]["tokens_per_s"] > 0
    assert [r["rows"] for r in result["decode"]] == list(bench.TINY.decode_rows)
    assert all(r["tokens_per_s"] > 0 for r in result["decode"])
    steps = result["trainer"]["steps"]
    assert [s["step"] for s in steps] == [0, 1]
    assert all(s[f"{phase}_s"] > 0 for s in steps for phase in ("rollout", "credit", "learner"))


def test_update_bench_averages_the_updates_after_the_compiling_one():
    bench = load_bench("update")

    def update(step, rollout, credit, learner, extra=0.0):
        return {"step": step, "time/rollout_s": rollout, "time/credit_s": credit,
                "time/learner_s": learner, "credit/prover/extra_policy_tokens_fraction": extra,
                "credit/prover/extra_policy_tokens": 100.0 * extra,
                "credit/prover/verification_wall_s": credit / 2}

    grpo = bench.phases([update(0, 30.0, 1.0, 40.0), update(1, 3.0, 0.0, 5.0),
                         update(2, 5.0, 0.0, 7.0)])
    assert (grpo["rollout"], grpo["credit"], grpo["learner"]) == (4.0, 0.0, 6.0)
    assert grpo["update"] == 10.0 and grpo["slowest_update"] == 12.0 and grpo["updates"] == 2
    prover = bench.phases([update(0, 30.0, 9.0, 40.0, 0.5), update(1, 4.0, 3.0, 6.0, 0.25),
                           update(2, 4.0, 3.0, 6.0, 0.15)])
    assert prover["extra_tokens"] == pytest.approx(0.2)
    # 100 group tokens an update in 4 s of rollout; 40 continuation tokens in 3 s of verifying
    assert prover["group_tokens_per_s"] == pytest.approx(25.0)
    assert prover["continuation_tokens_per_s"] == pytest.approx(40 / 3)
    assert prover["verification"] == 1.5 and "group_tokens_per_s" not in grpo
    # 13 s against 10 s is 30% more time for 20% more policy tokens
    assert bench.overhead(grpo, prover) == pytest.approx(1.5)
    assert bench.overhead(grpo, grpo) is None
    text = bench.table({"t": {"grpo": grpo, "prover": prover}})
    # a continuation token takes 1 / 13.3 s where a group token takes 1 / 25 s
    assert "| prover | 13.00 |" in text and "| 1.50 | 25 | 13 | 1.88 |" in text
    with pytest.raises(ValueError, match="at least 2 updates"):
        bench.phases([update(0, 1.0, 1.0, 1.0)])
    # asynchronous: an update is the learner's wait and its training; the rollout overlapped
    stale = bench.phases([{**update(0, 30.0, 1.0, 40.0), "time/wait_s": 30.0},
                          {**update(1, 3.0, 0.0, 5.0), "time/wait_s": 0.5},
                          {**update(2, 5.0, 0.0, 7.0), "time/wait_s": 1.5}])
    assert stale["update"] == 7.0 and stale["slowest_update"] == 8.5 and stale["rollout"] == 4.0
    calls = {"groups": {"calls": 2, "rows": 16, "generating_rows": 15.5, "tokens": 200,
                        "sampling_share": 0.8, "slots": {1024: 1, 512: 1}, "generate_s": 0.4,
                        "ms_per_token": 2.0, "prefill_rows_s": 0.1, "housekeeping_s": 0.05},
             "continuations": {"calls": 1, "rows": 16, "generating_rows": 8.0, "tokens": 50,
                               "sampling_share": 0.4, "slots": {2048: 1}, "generate_s": 0.2,
                               "ms_per_token": 4.0, "prefill_rows_s": 0.1,
                               "housekeeping_s": 0.0, "compile_s_per_update": [1.25, 0.0]}}
    text = bench.calls_table({"turns": calls})
    assert ("| turns | groups | 2 | 15.5 of 16 | 80% | 200 | 512: 1, 1,024: 1 | 0.40 | 2.00 |"
            in text)
    assert text.endswith("Compiles during the continuations, turns, by update (s): 1.2, 0.0")
