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
