"""README.md and the guide in docs/: every block runs, every link resolves, the demo's figures
come from its record.

Python blocks run as saved scripts. Shell commands of the project run as written where they are
quick (`QUICK`), else with ``--dry-run``, which checks every setting and reads nothing that an
earlier step or a download would make (`DRY_RUN`); commands that install, download, reach a cloud
or set the shell's variables (`NOT_RUN`) are checked for syntax only. A command that fits none
of them fails the test, so that every new command gets a rule.
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEST_EXTRAS = ("torch", "hypothesis", "pytest")
NEEDS_EXTRAS = "# needs the test extras"
QUICK = ("tpu.plan",)
DRY_RUN = ("prover_jax.train", "prover_jax.sft", "prover_jax.evaluate", "prover_jax.server",
           "prover_jax.runs", "tpu.compile", "tpu.launch")
NOT_RUN = ("hf", "pip", "gcloud", "export", "git", "make")


def blocks(language: str) -> list[tuple[str, str]]:
    """(page name, block) of every fenced block in `language`, each distinct block once."""
    found = {}
    for page in PAGES:
        for block in re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.DOTALL):
            found.setdefault(block, page.relative_to(ROOT).as_posix())
    return [(name, block) for block, name in found.items()]


def shell_commands() -> list[tuple[str, str]]:
    """(page name, command) of every shell block's commands, continuation lines joined and
    comments cut."""
    commands = []
    for name, block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"(^|\s)#.*$", "", line).strip()
            if command:
                commands.append((name, " ".join(command.split())))
    return commands


def as_run(command: str) -> list[str] | None:
    """How the test runs a documented command: its words with the test's python and, for
    `DRY_RUN` modules, ``--dry-run`` before any ``--``; None for a `NOT_RUN` command."""
    words = shlex.split(command)
    if words[0] in NOT_RUN:
        return None
    assert words[:2] == ["python", "-m"] and words[2] in QUICK + DRY_RUN, (
        f"no rule for the documented command {command!r}: add it to QUICK, DRY_RUN or NOT_RUN")
    words = [sys.executable, *words[1:]]
    if words[2] in DRY_RUN and "--dry-run" not in words:
        cut = words.index("--") if "--" in words else len(words)
        words.insert(cut, "--dry-run")
    return words


def test_readme_opens_with_the_two_commands_and_ci_runs_both():
    first_block = re.search(r"```bash\n(.*?)```", README, flags=re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert any(line.endswith("make demo") and "VENV=" in line for line in ci)  # a fresh venv
    assert ci[-1] == "make test"


def test_readme_is_short_and_links_every_guide_page():
    assert len(README.splitlines()) <= 200
    guide = {p.name for p in (ROOT / "docs").glob("*.md")} - {"alfworld-vs-household.md"}
    assert {name for name in guide if f"(docs/{name}" not in README} == set()


def anchor(heading: str) -> str:
    """The anchor a markdown renderer gives a heading: lower case, punctuation dropped, spaces
    as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves_to_a_file_and_heading(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target} does not exist"
        if fragment:
            headings = re.findall(r"^#+ (.*)$", linked.read_text(), flags=re.MULTILINE)
            assert fragment in map(anchor, headings), f"{page.name}: no heading for {target}"


def test_the_command_rules_cover_every_documented_command():
    commands = shell_commands()
    assert len(commands) > 20
    for _, command in commands:
        as_run(command)
    for name, block in blocks("bash"):
        syntax = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert syntax.returncode == 0, f"{name}: {syntax.stderr}"


def test_dry_run_checks_the_settings_and_says_what_is_missing(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "prover_jax.train", "--env", "housheold",
                          "--dry-run"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "did you mean 'household'" in bad.stderr
    run = subprocess.run([sys.executable, "-m", "prover_jax.train", "--init", "missing-model",
                          "--steps", "7", "--dry-run", "--run-dir", str(tmp_path / "run")],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "  steps = 7" in run.stdout and "reads missing-model (not there yet)" in run.stdout
    assert not (tmp_path / "run").exists()


RUN_COMMANDS = [(name, command) for name, command in shell_commands() if as_run(command)]


@pytest.mark.parametrize("name,command", RUN_COMMANDS,
                         ids=[f"{name}-{i}" for i, (name, _) in enumerate(RUN_COMMANDS)])
def test_documented_command_runs(name, command, tmp_path, monkeypatch, capsys):
    """As written, or as its dry run, from the repository with an empty home folder (so that
    `~/models/...` is a download the user has not made): the ``main`` that ``python -m``
    runs, in this process (`test_dry_run_checks_the_settings_and_says_what_is_missing`
    runs one in its own)."""
    words = [w.replace("~", str(tmp_path), 1) if w.startswith("~") else w
             for w in as_run(command)]
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HOME", str(tmp_path))
    package = importlib.import_module(words[2])
    entry = (package if hasattr(package, "main")
             else importlib.import_module(f"{words[2]}.__main__"))
    try:
        code = entry.main(words[3:]) or 0
    except SystemExit as stopped:
        code = stopped.code or 0
    assert code == 0, f"{name}: {command}\n{capsys.readouterr().err[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("name,code", blocks("python"),
                         ids=[f"{name}-{i}" for i, (name, _) in enumerate(blocks("python"))])
def test_python_block_runs_as_a_saved_script(name, code, tmp_path):
    """Each block, saved as a file and run with `python x.py` from another folder."""
    imports = " ".join(re.findall(r"^\s*(?:import|from) .*$", code, flags=re.MULTILINE))
    extras = [extra for extra in TEST_EXTRAS if re.search(rf"\b{extra}\b", imports)]
    assert not extras or NEEDS_EXTRAS in code, f"{name}: a block that imports {extras} must say so"
    script = tmp_path / "example.py"
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, f"{name}\n{run.stderr[-4000:]}"


def test_the_demos_figures_are_read_from_its_record():
    """The demo's output and the figures around it, as its committed record gives them (CI
    checks that `make demo` reproduces the record)."""
    from prover_jax.plot import read_metrics
    from prover_jax.train import closing_lines

    record = ROOT / "experiments" / "results" / "runs" / "demo"
    block = re.search(r"```\n(held-out greedy success:.*?)```", README, flags=re.DOTALL).group(1)
    printed = iter(closing_lines(record))
    assert all(line in printed for line in block.splitlines() if line.strip() != "...")
    rows = read_metrics(record)
    before, third, last = rows[0], rows[3], rows[-1]
    assert third["step"] == 2  # update 3
    prose = " ".join(README.split())
    success = last["eval/greedy/success"]
    assert (f"update 3: a judged segment verified and accepted with Δ "
            f"{third['credit/prover/mean_delta']:g}, VICT corrections on "
            f"{third['credit/vict/trigger_rate']:.0%} of the rollouts") in prose
    assert third["credit/prover/accepted"] == third["credit/prover/valid_proposals"] == 1
    error = (success * (1 - success) / last["eval/greedy/episodes"]) ** 0.5
    assert f"a standard error of about {error:.2f}" in prose
    assert (f"it measures {success:.3f} before and after" in prose
            and before["eval/greedy/success"] == success)


def test_the_guides_figures_from_the_demo_are_its_records():
    """The sampler-learner mismatch the guide quotes, and the KL its training plot's caption
    calls rounding, as the demo's committed record logs them (the largest of its updates)."""
    from prover_jax.plot import read_metrics

    rows = [r for r in read_metrics(ROOT / "experiments" / "results" / "runs" / "demo")
            if "learner/behaviour_kl" in r]
    gap = max(r["learner/behaviour_gap"] for r in rows)
    kl = max(r["learner/behaviour_kl"] for r in rows)
    real_qwen = " ".join((ROOT / "docs" / "real-qwen.md").read_text().split())
    assert f"gaps of about {gap:.0e} and KLs of about {kl:.0e}" in real_qwen
    training = " ".join((ROOT / "docs" / "training.md").read_text().split())
    assert f"the KL to the sampler is rounding, about {kl:.0e}" in training


def planned_total(command: str) -> str:
    """The remat total per device, as `tpu.plan` prints it, of a ``python -m tpu.plan ...``
    command."""
    import contextlib
    import io

    from tpu import plan

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        plan.main(shlex.split(command)[3:])
    return re.search(r"^\| total \| ([\d.]+) \|", printed.getvalue(), flags=re.MULTILINE)[1]


@pytest.mark.parametrize("recipe", sorted((ROOT / "configs" / "recipes").glob("*.yaml")),
                         ids=lambda path: path.stem)
def test_recipe_memory_figures_are_the_planners(recipe):
    """Each recipe's header states the `tpu.plan` command it was sized with and the GiB per
    chip that command prints; the guide's table of recipes quotes the same figure."""
    header = "".join(line.lstrip("# ") + "\n" for line in recipe.read_text().splitlines()
                     if line.startswith("#"))
    commands = re.findall(r"^(python -m tpu\.plan .*?)$", header.replace("\\\n", " "),
                          flags=re.MULTILINE)
    assert commands, f"{recipe.name} names no tpu.plan command"
    row = next(line for line in (ROOT / "docs" / "real-qwen.md").read_text().splitlines()
               if line.startswith(f"| `{recipe.stem}` |"))
    for command in commands:
        total = planned_total(command)
        assert f"{total} GiB" in " ".join(header.split()), (recipe.name, command, total)
        assert total in row, (recipe.name, total, row)
