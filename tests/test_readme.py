"""README.md: the two opening commands and every python example, run as a saved script."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
EXAMPLES = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)
TEST_EXTRAS = ("torch", "hypothesis", "pytest")
NEEDS_EXTRAS = "# needs the test extras"


def test_readme_opens_with_the_two_commands_and_ci_runs_both():
    first_block = re.search(r"```bash\n(.*?)```", README, flags=re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert any(line.endswith("make demo") and "VENV=" in line for line in ci)  # a fresh venv
    assert ci[-1] == "make test"


@pytest.mark.slow
@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs_as_a_saved_script(code, tmp_path):
    """Each block, saved as a file and run with `python x.py` from another folder."""
    imports = " ".join(re.findall(r"^\s*(?:import|from) .*$", code, flags=re.MULTILINE))
    extras = [name for name in TEST_EXTRAS if re.search(rf"\b{name}\b", imports)]
    assert not extras or NEEDS_EXTRAS in code, f"a block that imports {extras} must say so"
    script = tmp_path / "example.py"
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]


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

