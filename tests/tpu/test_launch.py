"""tpu.launch against a stand-in `gcloud` on PATH that records its arguments: the exact
command sequence of each step, --dry-run runs nothing, and a failing command stops the step."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tpu import launch
from tpu.launch.__main__ import main

STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["GCLOUD_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
fail = os.environ.get("GCLOUD_FAIL")
sys.exit(3 if fail and fail in sys.argv[1:] else 0)
"""


@pytest.fixture
def gcloud(tmp_path, monkeypatch):
    """The calls the stand-in received, as argument lists."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "gcloud"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "gcloud.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GCLOUD_LOG", str(log))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


TARGET = ["--name", "rl-1", "--zone", "us-east5-a", "--project", "lab"]
CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml")
TPU = ["compute", "tpus", "tpu-vm"]
WHERE = ["--zone=us-east5-a", "--project=lab"]


def test_up_runs_create_install_copy_train_in_order(gcloud, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("steps: 2\n")
    tarball = tmp_path / "src.tar.gz"
    target = launch.Target("rl-1", "us-east5-a", project="lab", spot=True, config=str(config),
                           model="/models/qwen", train_args=("--set", "steps=5"),
                           tarball=str(tarball))
    assert launch.execute(launch.up(target), dry_run=False, echo=lambda line: None) == 0
    assert tarball.stat().st_size > 0  # `git archive` of this checkout ran for real
    assert gcloud() == [
        [*TPU, "create", "rl-1", "--accelerator-type=v5litepod-8",
         "--version=v2-alpha-tpuv5-lite", "--spot", *WHERE],
        [*TPU, "scp", str(tarball), "rl-1:prover-jax.tar.gz", "--worker=all", *WHERE],
        [*TPU, "ssh", "rl-1", "--worker=all",
         ("--command=mkdir -p prover-jax && tar -xzf prover-jax.tar.gz -C prover-jax && "
          f"{launch.FIND_PYTHON} && $PY -m venv prover-venv && "
          "prover-venv/bin/python -m pip install --quiet -e 'prover-jax[tpu]'"), *WHERE],
        [*TPU, "ssh", "rl-1", "--worker=all", "--command=mkdir -p run", *WHERE],
        [*TPU, "scp", str(config), "rl-1:run/config.yaml", "--worker=all", *WHERE],
        [*TPU, "scp", "--recurse", "/models/qwen", "rl-1:run/model", "--worker=all", *WHERE],
        [*TPU, "ssh", "rl-1", "--worker=all",
         ("--command=cd ~ && nohup prover-venv/bin/python -m tpu.train --config "
          "run/config.yaml --run-dir run/out --init run/model --set steps=5 > run/train.log "
          "2>&1 < /dev/null &"), *WHERE],
    ]


@pytest.mark.parametrize("step, expected", [
    ("logs", [[*TPU, "ssh", "rl-1", "--worker=0", "--command=tail -n 200 -f run/train.log",
               *WHERE]]),
    ("fetch", [[*TPU, "scp", "--recurse", "rl-1:run/out", "runs/", "--worker=0", *WHERE]]),
    ("delete", [[*TPU, "delete", "rl-1", "--quiet", *WHERE]]),
])
def test_single_command_steps(gcloud, step, expected):
    assert main([step, *TARGET, "--local-dir", "runs/"]) == 0
    assert gcloud() == expected


def test_dry_run_prints_and_runs_nothing(gcloud, capsys):
    assert main(["delete", *TARGET, "--dry-run"]) == 0
    assert gcloud() == []
    assert capsys.readouterr().out.strip() == (
        "would run: gcloud compute tpus tpu-vm delete rl-1 --quiet --zone=us-east5-a "
        "--project=lab")


def test_a_failing_step_stops_the_sequence(gcloud, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GCLOUD_FAIL", "scp")
    config = tmp_path / "c.yaml"
    config.write_text("steps: 1\n")
    assert main(["copy", *TARGET, "--config", str(config)]) == 3
    assert [call[3] for call in gcloud()] == ["ssh", "scp"]  # no train, no model copy after
    assert "exited with status 3" in capsys.readouterr().out


@pytest.mark.parametrize("accelerator, runtime", [
    ("v4-32", "tpu-ubuntu2204-base"), ("v5litepod-8", "v2-alpha-tpuv5-lite"),
    ("v5p-16", "v2-alpha-tpuv5"), ("v6e-8", "v2-alpha-tpuv6e")])
def test_a_slice_is_created_with_its_chips_software_unless_told(gcloud, accelerator, runtime):
    assert main(["create", *TARGET, "--accelerator-type", accelerator]) == 0
    assert main(["create", *TARGET, "--accelerator-type", accelerator, "--version", "mine"]) == 0
    assert [call[6] for call in gcloud()] == [f"--version={runtime}", "--version=mine"]


def test_missing_settings_are_errors(capsys):
    with pytest.raises(SystemExit):
        main(["copy", *TARGET])
    assert "copy: --config is required" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--name is required"):
        launch.Target("", "z")
    with pytest.raises(SystemExit):
        main(["create", *TARGET, "--accelerator-type", "v5x-8"])
    assert "expected FAMILY-COUNT" in capsys.readouterr().err


@pytest.mark.parametrize("step", ["create", "train"])
def test_a_misspelt_flag_is_a_usage_error_and_runs_nothing(gcloud, capsys, step):
    with pytest.raises(SystemExit) as raised:
        main([step, *TARGET, "--acelerator-type", "v4-8"])
    assert raised.value.code == 2
    assert "unrecognized arguments: --acelerator-type v4-8" in capsys.readouterr().err
    assert gcloud() == []  # the default VM was not created, nor the trainer started


def test_the_trainer_gets_exactly_what_follows_the_separator(gcloud):
    trainer = ["--steps", "5", "--set", "sampling.max_new_tokens=64"]
    assert main(["train", *TARGET, "--", *trainer]) == 0
    assert gcloud() == [[*TPU, "ssh", "rl-1", "--worker=all",
                         ("--command=cd ~ && nohup prover-venv/bin/python -m tpu.train "
                          "--config run/config.yaml --run-dir run/out --steps 5 --set "
                          "sampling.max_new_tokens=64 > run/train.log 2>&1 < /dev/null &"),
                         *WHERE]]


@pytest.mark.parametrize(("train_args", "said"), [
    (["--set", "sampling.temperature=0.7"], "the sampler must draw from it too (temperature 1"),
    (["--env", "housheold"], "did you mean 'household'")])
def test_a_setting_the_trainer_would_refuse_fails_here_even_in_a_dry_run(gcloud, capsys,
                                                                         train_args, said):
    with pytest.raises(SystemExit) as raised:
        main(["up", *TARGET, "--config", CONFIG, "--dry-run", "--skip-compile", "--",
              *train_args])
    assert raised.value.code == 2 and said in capsys.readouterr().err
    with pytest.raises(SystemExit) as raised:
        main(["train", *TARGET, "--config", "missing.yaml", "--", "--steps", "5"])
    assert raised.value.code == 2 and "missing.yaml" in capsys.readouterr().err
    assert gcloud() == []


@pytest.mark.parametrize("step", ["train", "up"])
def test_a_trainer_argument_the_trainer_would_not_take_fails_here(gcloud, capsys, step):
    with pytest.raises(SystemExit) as raised:
        main([step, *TARGET, "--config", "c.yaml", "--skip-compile", "--", "--stpes", "5",
              "--coordinator", "10.0.0.2:1234"])  # tpu.train's own flags pass
    assert raised.value.code == 2
    assert "the trainer takes no --stpes 5" in capsys.readouterr().err
    assert gcloud() == []


def test_up_passes_the_trainer_arguments_to_its_train_command(gcloud, capsys):
    assert main(["up", *TARGET, "--config", CONFIG, "--dry-run", "--skip-compile", "--",
                 "--steps", "5"]) == 0
    assert gcloud() == []
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "python -m tpu.train --config run/config.yaml --run-dir run/out --steps 5 >" in last


@pytest.mark.parametrize("step", ["create", "copy", "logs", "fetch", "delete"])
def test_trainer_arguments_elsewhere_are_a_usage_error(gcloud, capsys, tmp_path, step):
    with pytest.raises(SystemExit) as raised:
        main([step, *TARGET, "--config", str(tmp_path / "c.yaml"), "--", "--steps", "5"])
    assert raised.value.code == 2
    assert f"{step} takes no trainer arguments" in capsys.readouterr().err
    assert gcloud() == []


@pytest.mark.parametrize("fits", [True, False])
def test_up_compiles_the_config_for_the_slice_before_creating_it(gcloud, capsys, monkeypatch,
                                                                 fits):
    from tpu import compile as tpu_compile

    asked = []

    def preflight(config, accelerator, model, overrides, echo):
        asked.append((config, accelerator, model, overrides))
        echo("compiled")
        return tpu_compile.Verdict(fits, "" if fits else "suggested instead: mesh fsdp=-1")

    monkeypatch.setattr(tpu_compile, "preflight", preflight)
    status = main(["up", *TARGET, "--config", CONFIG, "--accelerator-type", "v5p-32",
                   "--", "--steps", "5", "--groups", "8", "--set", "mesh.fsdp=-1",
                   "--set=sampling.max_new_tokens=64"])
    assert asked == [(CONFIG, "v5p-32", None, ["steps=5", "groups=8", "mesh.fsdp=-1",
                                                 "sampling.max_new_tokens=64"])]
    out = capsys.readouterr().out
    if fits:  # then the steps run, create first
        assert status == 0 and gcloud()[0][:4] == [*TPU, "create"]
    else:
        assert status == 1 and gcloud() == []
        assert "refusing to create v5p-32" in out and "--skip-compile" in out
        assert "suggested instead: mesh fsdp=-1" in out and "above" not in out
