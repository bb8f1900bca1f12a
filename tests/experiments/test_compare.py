"""The committed experiments still run: each in its smoke mode (a step or two, nothing kept);
the comparison's analysis on hand-made records."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from experiments import compare

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_comparison_runs_resumes_from_its_records_and_reports_what_finished(capsys,
                                                                                 tmp_path):
    # the script is the same for every arm; the budget-matched one also runs the ProVer arm it
    # takes its group sizes from
    args = ["--smoke", "--study", "powered", "--runs", str(tmp_path), "--seeds", "0"]
    compare.main([*args, "--arms", "grpo-budget-matched"])
    table = capsys.readouterr().out
    assert "| prover | 1 |" in table and "| grpo-budget-matched | 1 |" in table
    records, start = tmp_path / "records", compare.STUDIES["powered"].start.name
    assert (records / start / "model" / "model.safetensors").exists()
    assert (tmp_path / "powered" / "prover-seed0" / "checkpoints").exists()
    final = json.loads((records / "prover-seed0" / compare.FINAL_EVAL).read_text())
    assert {compare.SUCCESS, compare.SAMPLED_SUCCESS} <= set(final)
    assert compare.finished(records / "prover-seed0", compare.STUDIES["powered"].record_files)
    for run in (start, "powered/prover-seed0", "powered/grpo-budget-matched-seed0"):
        shutil.rmtree(tmp_path / run)  # the records are enough
    compare.main([*args, "--arms", "grpo-budget-matched"])
    assert capsys.readouterr().out == table
    assert not (tmp_path / "powered" / "prover-seed0").exists()
    (records / "grpo-budget-matched-seed0" / "metrics.jsonl").unlink()  # as if never run
    compare.main([*args, "1", "--report"])
    table = capsys.readouterr().out
    assert "| prover | 1 |" in table and "grpo-budget-matched" not in table


def test_the_first_comparisons_summary_is_its_records_summarized(capsys):
    study = compare.STUDIES["first"]
    compare.main(["--smoke", "--report", "--records", str(study.records)])
    committed = json.loads(study.summary.read_text())
    assert capsys.readouterr().out == compare.table(committed["arms"],
                                                    committed["start_success"]) + "\n"


def write_metrics(run_dir, rows):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run_dir


def evaluated_run(run_dir, successes, mixed=0.5, before=None):
    """A run evaluated after updates 20, 40, 60 (`successes`), `before` it trained if given."""
    rows = [{"step": step, "success/mixed_groups": mixed, "credit/vict/abstain/budget": 1.0,
             "time/rollout_s": 1.0 + step % 2, "time/credit_s": 0.5,
             "time/learner_s": 2.0} for step in range(60)]
    for step, success in zip((19, 39, 59), successes, strict=True):
        rows[step][compare.SUCCESS] = success
    return write_metrics(run_dir, ([] if before is None else
                                   [{"step": -1, compare.SUCCESS: before}]) + rows)


def test_a_runs_auc_averages_its_evaluations_and_its_start(tmp_path):
    run = evaluated_run(tmp_path / "sft-start", [0.3, 0.4, 0.5])
    assert compare.auc(run, start_success=0.2) == pytest.approx(0.35)
    own = evaluated_run(tmp_path / "own-start", [0.3, 0.4, 0.5], before=0.1)
    assert compare.auc(own, start_success=0.2) == pytest.approx(0.325)


def test_the_bootstrap_interval_is_the_exact_resampling_distributions():
    differences = np.array([0.0, 0.1, 0.3, 0.6, 0.05])
    every_resample = [np.mean(draw) for draw in itertools.product(differences, repeat=5)]
    low, high = compare.bootstrap_interval(differences)
    assert (low, high) == pytest.approx(tuple(np.quantile(every_resample, [0.025, 0.975])),
                                        abs=0.01)
    assert low < np.mean(differences) < high
    assert compare.bootstrap_interval(np.full(3, 0.25)) == (0.25, 0.25)


def test_arms_are_compared_with_grpo_seed_by_seed(tmp_path):
    def run(name, successes, final):
        path = evaluated_run(tmp_path / name, successes)
        (path / compare.FINAL_EVAL).write_text(json.dumps(
            {compare.SUCCESS: final, f"{compare.SUCCESS}/pick": final, compare.SAMPLED_SUCCESS:
             final / 2, "eval/greedy/actions": 9.0}))
        return path

    runs = {"grpo": {0: run("g0", [0.2, 0.2, 0.2], 0.2), 1: run("g1", [0.3, 0.3, 0.3], 0.3)},
            "vict": {0: run("v0", [0.4, 0.4, 0.4], 0.4), 1: run("v1", [0.3, 0.3, 0.3], 0.5),
                     2: run("v2", [0.9, 0.9, 0.9], 0.9)}}
    summary = compare.summarize_powered(runs, start_success=0.2)
    auc = summary["vict"]["versus_grpo"]["auc"]  # seed 2 has no GRPO run to pair with
    assert auc["seeds"] == [0, 1] and auc["differences"] == pytest.approx([0.15, 0.0])
    assert auc["interval"] == pytest.approx([0.0, 0.15]) and auc["mean"] == pytest.approx(0.075)
    assert set(summary["vict"]["versus_grpo"]) == {"auc", compare.SUCCESS,
                                                  f"{compare.SUCCESS}/pick",
                                                  compare.SAMPLED_SUCCESS}
    assert summary["grpo"]["versus_grpo"] == {}
    assert summary["vict"]["means"]["success/mixed_groups"] == 0.5
    assert summary["vict"]["means"]["credit/vict/abstain/budget"] == 1.0
    table = compare.powered_table(summary, 0.2)
    assert "| vict | 3 | 0.450 | +0.075 [+0.000, +0.150] | 0.600 | 0.300 | 0.500 |" in table
    assert ("| vict | +0.200 [+0.200, +0.200] | +0.100 [+0.100, +0.100] "
            "| +0.200 [+0.200, +0.200] |") in table  # final greedy, sampled, greedy on pick
    assert "| vict | 0.500 | - | - | 4.000 | - | - | - | 1.000 |" in table  # s / update


def probed_run(run_dir, probes, mass=0.9):
    """A pivotal-testbed run of 20 updates probed before them and after updates 10 and 20."""
    rows = [{"step": step, "success/rate": 0.25, "credit/mass/outcome": mass,
             "credit/mass/prover": 1 - mass, "time/rollout_s": 2.0, "time/credit_s": 1.0,
             "time/learner_s": 1.0} for step in range(20)]
    before = {"step": -1}
    for row, probe in zip([before, rows[9], rows[19]], probes, strict=True):
        row.update({compare.PROBE: probe, "eval/probe/p_right_action": probe / 2,
                    "eval/probe/p_wrong_action": 0.1})
    return write_metrics(run_dir, [before, *rows])


def test_pivot_arms_are_tested_against_grpo_seed_by_seed(tmp_path):
    from scipy import stats

    grpo = {seed: probed_run(tmp_path / f"g{seed}", [0.6, 0.6, 0.6]) for seed in range(4)}
    control = {seed: probed_run(tmp_path / f"c{seed}", [0.6, 0.6 + gain, 0.6 + 2 * gain])
               for seed, gain in enumerate([0.03, 0.06, 0.015, 0.09])}
    mixed = {seed: probed_run(tmp_path / f"m{seed}", [0.6, 0.6 + gain, 0.6])
             for seed, gain in enumerate([0.03, -0.03, 0.03, 0.0])}
    summary = compare.summarize_pivot({"grpo": grpo, "oracle-progress": control,
                                       "prover-oracle-judge": mixed}, start_success=0.0)
    area = summary["oracle-progress"]["versus_grpo"]["probe_area"]
    differences = np.array([0.03, 0.06, 0.015, 0.09])  # the area is the mean of 3 probes
    assert area["differences"] == pytest.approx(differences)
    t = differences.mean() / (differences.std(ddof=1) / 2)
    assert area["t_p"] == pytest.approx(stats.t.sf(t, df=3))
    assert area["above"] == 4 and area["sign_p"] == pytest.approx(1 / 16)
    assert area["separates"]
    other = summary["prover-oracle-judge"]["versus_grpo"]["probe_area"]
    assert other["above"] == 2 and other["sign_p"] == pytest.approx(4 / 8)  # of 3 that differ
    assert not other["separates"]
    low, high = sorted([area["t_p"], other["t_p"]])
    assert area["t_p_holm"] == pytest.approx(2 * low)  # the smaller p, doubled
    assert other["t_p_holm"] == pytest.approx(max(2 * low, high))
    assert summary["grpo"]["versus_grpo"] == {}
    means = summary["oracle-progress"]["means"]
    assert means["probe_start"] == 0.6 and means["credit/mass/prover"] == pytest.approx(0.1)
    assert means[compare.UPDATE_SECONDS] == 4.0
    curve = summary["oracle-progress"]["curves"]["1"]
    assert curve["updates"] == [0, 10, 20] and curve["probe"] == pytest.approx([0.6, 0.66, 0.72])
    # p(right) is half the probe, p(wrong) 0.1: the discrimination area moves by half as much
    discrimination = summary["oracle-progress"]["versus_grpo"][compare.DISCRIMINATION]
    assert discrimination["differences"] == pytest.approx(differences / 2)
    assert means[compare.DISCRIMINATION] == pytest.approx((0.6 + differences.mean()) / 2 - 0.1)
    table = compare.pivot_table(summary, 0.0)
    assert "| oracle-progress | 4 | 0.649 | +0.049 [" in table and "| 4 of 4 |" in table
    assert "| 0.224 | +0.024 [" in table  # its discrimination area and difference to GRPO
    assert "| grpo | 4 | 0.600 | - | - | - | - | - |" in table


def test_holm_adjusts_the_smallest_p_value_most_and_keeps_the_order():
    adjusted = compare.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": None})
    assert adjusted.pop("d") is None
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_the_seeds_for_power_detect_the_effect_as_often_as_asked():
    rng = np.random.default_rng(0)

    def power(seeds):
        from scipy import stats

        draws = rng.normal(0.5, 1.0, size=(20_000, seeds))
        t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / np.sqrt(seeds))
        return np.mean(t > stats.t.ppf(0.95, seeds - 1))

    seeds = compare.seeds_for_power(spread=1.0, effect=0.5)
    assert power(seeds) >= 0.79 and power(seeds - 1) < 0.8
    assert compare.seeds_for_power(spread=1.0, effect=0.01, most=10) is None


def test_the_credit_placement_experiment_runs(capsys):
    from experiments import credit_placement

    credit_placement.main(["--smoke"])
    table = capsys.readouterr().out
    for method in ("prover", "prover-random-judge", "vict", "vict-rejected-as-witnesses",
                   "gigpo"):
        assert f"| {method} |" in table
    assert "| vict | negative_mass_on_rejected | 0.000 |" in table  # never on a rejected one


def test_docs_say_where_credit_landed_in_the_recorded_run():
    from experiments import credit_placement

    recorded = json.loads((ROOT / "experiments" / "results" / "credit_placement.json")
                          .read_text())["results"]
    assert credit_placement.summary(recorded) in (ROOT / "docs" / "results.md").read_text()
    assert recorded["vict"]["negative_mass_on_rejected"] == 0.0


def test_the_pivot_start_experiment_runs_and_the_oracle_judge_always_holds_the_pivot(capsys):
    from experiments import pivot_start

    pivot_start.main(["--demonstrator", "--smoke"])
    out = capsys.readouterr().out
    assert "| sampled success |" in out and "| verifier |" in out
    oracle = next(line for line in out.splitlines() if line.startswith("| oracle |"))
    judged, valid, precision = oracle.split("|")[2:5]
    assert int(judged) > 0 and int(valid) == int(judged) and float(precision) == 1.0


def test_docs_give_the_recorded_pivot_start():
    from experiments import pivot_start

    recorded = json.loads((ROOT / "experiments" / "results" / "pivot_start-sft-pivot.json")
                          .read_text())["results"]
    docs = (ROOT / "docs" / "results.md").read_text()
    assert pivot_start.gate_table(recorded["gate"]) in docs
    assert pivot_start.judges_table(recorded) in docs
    assert pivot_start.probe_line(recorded["probe"]) in docs
    demonstrator = json.loads((ROOT / "experiments" / "results"
                               / "pivot_start-demonstrator.json").read_text())["results"]
    assert pivot_start.judges_table(demonstrator) in docs
    second = json.loads((ROOT / "experiments" / "results" / "pivot_start-sft-pivot-2.json")
                        .read_text())["results"]
    assert pivot_start.gate_table(second["gate"]) in docs
    assert pivot_start.probe_line(second["probe"]) in docs
    assert pivot_start.judges_table(second) in docs  # the table the comparison reports
    assert second["gate"]["groups_1_3"] > 0.5  # the gate the docs say it passes


def test_results_summary_quotes_the_recorded_pivot_start():
    r = json.loads((ROOT / "experiments" / "results" / "pivot_start-sft-pivot.json")
                   .read_text())["results"]
    summary = " ".join((ROOT / "docs" / "results.md").read_text().split())
    gate = r["gate"]
    precision = {name: f"{r[name]['pivot_precision']:.0%}"
                 for name in ("verifier", "contrastive", "random")}
    phrases = [
        f"(probe {r['probe']['score']:.3f})",
        (f"sampled success {gate['success']:.3f} leaves {gate['groups_1_3']:.0%} of groups of 8 "
         "with 1-3 successes"),
        (f"the verifier's judge holds the pivot in {precision['verifier']} of its proposals, "
         f"the contrastive judge in {precision['contrastive']}, a random segment in "
         f"{precision['random']}"),
        f"has median {r['oracle']['median_delta']:+.3f}",
    ]
    second = json.loads((ROOT / "experiments" / "results" / "pivot_start-sft-pivot-2.json")
                        .read_text())["results"]
    phrases.append(f"the second SFT stage passes the gate (sampled success "
                   f"{second['gate']['success']:.3f} leaves {second['gate']['groups_1_3']:.0%} of "
                   f"groups of 8 with 1-3 successes, probe {second['probe']['score']:.3f})")
    phrases.append(f"on its rollouts the verifier's judge holds the pivot in "
                   f"{second['verifier']['pivot_precision']:.0%} of its proposals, the contrastive "
                   f"judge in {second['contrastive']['pivot_precision']:.0%}, a random segment in "
                   f"{second['random']['pivot_precision']:.0%}, and the Δ at the pivot has median "
                   f"{second['oracle']['median_delta']:+.3f}")
    docs = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert (f"median {second['oracle']['median_delta']:+.3f}, mean "
            f"{second['oracle']['mean_delta']:+.3f}") in docs
    for phrase in phrases:
        assert phrase in summary, phrase


def test_the_pilots_secondary_line_quotes_grpos_record():
    rows = compare.read_metrics(ROOT / "experiments" / "results" / "pivot-pilot" / "grpo-seed0")
    probes = [row for row in rows if compare.PROBE in row]
    first, last = probes[0], probes[-1]
    docs = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert (f"its probe score fell from {first[compare.PROBE]:.3f} to {last[compare.PROBE]:.3f}"
            in docs)
    assert (f"p(take) of the goal object {first['eval/probe/p_right_action']:.3f} → "
            f"{last['eval/probe/p_right_action']:.3f}, of a look-alike "
            f"{first['eval/probe/p_wrong_action']:.3f} → {last['eval/probe/p_wrong_action']:.3f}"
            in docs)


def test_the_pilots_seed_0_figures_are_its_records_summarized():
    study = compare.STUDIES["pivot-pilot"]
    arms = ("grpo", "prover-oracle-judge", "oracle-progress")
    runs = {arm: {0: study.records / compare.run_name(arm, 0)} for arm in arms}
    summary = compare.summarize_pivot(runs, 0.0)
    figures = {arm: summary[arm]["runs"]["0"] for arm in arms}
    docs = " ".join((ROOT / "docs" / "results.md").read_text().split())
    grpo, oracle, dense = (figures[arm] for arm in arms)
    difference = {arm: summary[arm]["versus_grpo"]["probe_area"]["mean"] for arm in arms[1:]}
    assert (f"probe area GRPO {grpo['probe_area']:.3f}, ProVer with the oracle judge "
            f"{oracle['probe_area']:.3f} ({difference['prover-oracle-judge']:+.3f}), the dense "
            f"oracle credit {dense['probe_area']:.3f} ({difference['oracle-progress']:+.3f})"
            in docs)
    assert ("discrimination areas are " + ", ".join(
        f"{figures[arm]['discrimination_area']:.3f}" for arm in arms[:2])
        + f" and {dense['discrimination_area']:.3f}") in docs
    for key, what in (("p_right_action_final", "of the goal object"),
                      ("p_wrong_action_final", "of a look-alike")):
        values = [f"{figures[arm][key]:.3f}" for arm in arms]
        assert f"{what} {values[0]}, {values[1]} and {values[2]}" in docs
    assert (f"dense credit was {dense['credit/mass/oracle-progress']:.1%} of the advantage mass, "
            f"ProVer's bonus {oracle['credit/mass/prover']:.1%}") in docs
    prover = summary["prover-oracle-judge"]  # acceptance and Δ pooled over proposals
    assert (f"({oracle['credit/prover/valid_proposals']:.1f} proposals an update, "
            f"{prover['credit/prover/acceptance_rate']:.0%} accepted, mean Δ "
            f"{prover['credit/prover/mean_delta']:+.3f})") in docs


def test_the_supervised_controls_figures_are_its_records():
    """docs/results.md, "The pilot stopped": GRPO's seed 1, and the start trained on the
    clue-following expert's demonstrations measured as the start was."""
    from experiments import pivot_start

    docs = (ROOT / "docs" / "results.md").read_text()
    flat = " ".join(docs.split())
    study = compare.STUDIES["pivot-pilot"]
    grpo = compare.summarize_pivot({"grpo": {1: study.records / "grpo-seed1"}}, 0.0)
    seed1 = grpo["grpo"]["runs"]["1"]
    assert (f"GRPO's seed 1 followed (probe area {seed1['probe_area']:.3f}, discrimination area "
            f"{seed1['discrimination_area']:.3f})") in flat
    results = ROOT / "experiments" / "results"
    control = json.loads((results / "pivot_start-sft-pivot-clue.json").read_text())["results"]
    start = json.loads((results / "pivot_start-sft-pivot-2.json").read_text())["results"]
    assert pivot_start.gate_table(control["gate"]) in docs
    assert pivot_start.probe_line(control["probe"]) in docs
    assert (f"is the goal object {control['gate']['goal_object_chosen']:.0%} of the time"
            in flat)
    assert (f"sampled success rose ({start['gate']['success']:.3f} to "
            f"{control['gate']['success']:.3f})") in flat
    config = json.loads((results / "runs" / "sft-pivot-clue" / "config.json").read_text())
    assert config["env_options"] == {"demonstrator": "clue"}
    assert (config["demonstrations"], config["steps"]) == (1280, 160)
    assert f"trained on {config['demonstrations']:,} demonstrations" in flat

    always = json.loads((results / "pivot_start-sft-pivot-clue-always.json").read_text())
    start_always = json.loads((results / "pivot_start-sft-pivot-2-clue-always.json").read_text())
    assert always["settings"]["clue"] == start_always["settings"]["clue"] == "always"
    always, start_always = always["results"], start_always["results"]
    assert pivot_start.gate_table(always["gate"]) in docs
    assert pivot_start.probe_line(always["probe"]) in docs
    assert (f"2-clue-always.json`): {pivot_start.probe_line(start_always['probe'])} (its "
            f"sampled success {start_always['gate']['success']:.3f}") in flat

    def discrimination(probe):
        return f"{probe['p_right_action'] - probe['p_wrong_action']:.3f}"

    assert (f"a discrimination of {discrimination(always['probe'])} (p(take) of the goal object "
            f"minus that of a look-alike) against the start's "
            f"{discrimination(start_always['probe'])} on the same states, and the goal object in "
            f"{always['gate']['goal_object_chosen']:.0%} of the look-alikes delivered or handled "
            f"(the start: {start_always['gate']['goal_object_chosen']:.0%})") in flat
    config = json.loads((results / "runs" / "sft-pivot-clue-always" / "config.json").read_text())
    assert config["env_options"] == {"demonstrator": "clue", "clue": "always"}
    assert (config["demonstrations"], config["steps"]) == (1280, 160)

    choices = json.loads((results / "pivot_start-sft-pivot-clue-choices.json").read_text())
    choices = choices["results"]
    assert pivot_start.gate_table(choices["gate"]) in docs
    assert pivot_start.probe_line(choices["probe"]) in docs
    assert (f"A discrimination of {discrimination(choices['probe'])} (the start's "
            f"{discrimination(start['probe'])}), and the goal object in "
            f"{choices['gate']['goal_object_chosen']:.0%}") in flat
    assert (f"(p(take) {start['probe']['p_wrong_action']:.3f} to "
            f"{choices['probe']['p_wrong_action']:.3f})") in flat
    assert (f"(valid actions {start['gate']['valid_actions']:.3f} to "
            f"{choices['gate']['valid_actions']:.3f}, sampled success "
            f"{start['gate']['success']:.3f} to {choices['gate']['success']:.3f})") in flat
    config = json.loads((results / "runs" / "sft-pivot-clue-choices" / "config.json").read_text())
    assert config["env_options"] == {"demonstrator": "clue"} and config["train_on"] == "choices"
    assert (config["demonstrations"], config["steps"]) == (1280, 160)

    marked = json.loads((results / "pivot_start-sft-pivot-2-clue-marked.json").read_text())
    assert marked["settings"]["clue"] == "marked"
    marked = marked["results"]
    assert pivot_start.gate_table(marked["gate"]) in docs
    assert pivot_start.probe_line(marked["probe"]) in docs
    assert f"hold 1-3 successes ({marked['gate']['groups_1_3']:.2f})" in flat
    assert f"(a discrimination of {discrimination(marked['probe'])})" in flat

    control = json.loads((results / "pivot_start-sft-pivot-marked-clue-marked.json").read_text())
    assert control["settings"]["clue"] == "marked"
    control = control["results"]
    assert pivot_start.gate_table(control["gate"]) in docs
    assert pivot_start.probe_line(control["probe"]) in docs
    assert (f"A discrimination of {discrimination(control['probe'])} (the start's "
            f"{discrimination(marked['probe'])} on the same variant), the goal object in "
            f"{control['gate']['goal_object_chosen']:.0%} of the look-alikes delivered or "
            f"handled, and sampled success {marked['gate']['success']:.3f} to "
            f"{control['gate']['success']:.3f}") in flat
    assert control["probe"]["p_right_action"] - control["probe"]["p_wrong_action"] > 0.2
    assert (f"the same control learns the choice (p(take) of the goal object "
            f"{control['probe']['p_right_action']:.3f}, of a look-alike "
            f"{control['probe']['p_wrong_action']:.3f})") in flat
    readme = (ROOT / "README.md").read_text()
    learned = control["probe"]["p_right_action"] - control["probe"]["p_wrong_action"]
    assert f"(probe discrimination {learned:.2f})" in readme
    assert marked["gate"]["groups_1_3"] > 0.5  # the start passes the gate on this variant
    config = json.loads((results / "runs" / "sft-pivot-marked" / "config.json").read_text())
    assert config["env_options"] == {"demonstrator": "clue", "clue": "marked"}
    assert (config["demonstrations"], config["steps"]) == (1280, 160)
    pilot = compare.load_config(compare.TrainConfig, compare.STUDIES["pivot-pilot-marked"].config)
    first = compare.load_config(compare.TrainConfig, compare.STUDIES["pivot-pilot"].config)
    assert pilot == dataclasses.replace(first, env_options={"clue": "marked"})


def test_the_asynchronous_studys_figures_are_its_records_summarized():
    """docs/results.md, "Asynchronous updates against synchronous ones": the primary table and
    the paired differences, from the records of both arms (the synchronous GRPO's are the
    powered study's)."""
    study = compare.STUDIES["asynchronous"]
    assert study.records == compare.STUDIES["powered"].records
    committed = json.loads(study.summary.read_text())
    runs = {arm: {seed: study.records / compare.run_name(arm, seed) for seed in study.seeds}
            for arm in study.arms}
    assert compare.summarize_powered(runs, committed["start_success"]) == committed["arms"]
    docs = (ROOT / "docs" / "results.md").read_text()
    flat = " ".join(docs.split())
    assert compare.powered_table(committed["arms"], committed["start_success"]).split(
        "\n\n")[1] in docs
    versus = committed["arms"]["grpo-async"]["versus_grpo"]

    def interval(key):
        low, high = versus[key]["interval"]
        return f"{versus[key]['mean']:+.3f} [{low:+.3f}, {high:+.3f}]"

    auc = versus["auc"]
    assert (f"The paired AUC difference is {auc['mean']:+.3f} (seeds 0-2: "
            + ", ".join(f"{d:+.3f}" for d in auc["differences"])
            + f"; 95% interval [{auc['interval'][0]:+.3f}, {auc['interval'][1]:+.3f}])") in flat
    assert (f"the final greedy success differs by {interval('eval/greedy/success')} and the "
            f"final sampled success by {interval('eval/sampled/success')}") in flat
    assert (f"learns as the synchronous GRPO does (AUC {interval('auc')})") in flat
    assert auc["interval"][0] <= 0 <= auc["interval"][1] and abs(auc["mean"]) < 0.05
    config = json.loads((study.records / "grpo-async-seed0" / "config.json").read_text())
    assert config["asynchronous"]["max_staleness"] == 1
