"""Another package's environment, declared under the `prover_jax.envs` entry-point group, is
found by name in this process, in the pool's worker processes and by the trainer's settings
check. The package is docs/environments.md's example, installed as a real distribution
(a ``.dist-info`` folder on the path), so importlib.metadata finds it as pip would leave it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "environments.md").read_text()
USE = """
import envs
from envs.base import Task
from envs.pool import EnvPool

if __name__ == "__main__":
    assert "lock" in envs.names()
    env = envs.make("lock")
    first = env.reset(Task("lock", "train", 5))
    with EnvPool("lock", num_slots=2, num_workers=2) as pool:
        assert pool.reset([1], [Task("lock", "train", 5)]) == [first]
    print("found", type(env).__module__)
"""


def installed(folder: Path) -> dict[str, str]:
    """The guide's lock environment as the installed package ``my_lock``; the environment
    variables of a process that has it on its path."""
    example = GUIDE[GUIDE.index("## Bringing your own"):]
    (folder / "my_lock.py").write_text(re.search(r"```python\n(.*?)```", example,
                                                 flags=re.DOTALL).group(1))
    info = folder / "my_lock-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-lock\nVersion: 0.1\n")
    declared = re.search(r"```toml\n(.*?)```", example, flags=re.DOTALL).group(1)
    points = tomllib.loads(declared)["project"]["entry-points"]["prover_jax.envs"]
    assert points == {"lock": "my_package.lock:LockEnv"}
    (info / "entry_points.txt").write_text("[prover_jax.envs]\nlock = my_lock:LockEnv\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]),
            "JAX_PLATFORMS": "cpu"}


def test_an_installed_packages_environment_is_found_by_name(tmp_path):
    env = installed(tmp_path)
    script = tmp_path / "use.py"
    script.write_text(USE)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "found my_lock"
    check = subprocess.run([sys.executable, "-m", "prover_jax.train", "--env", "lock",
                            "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert check.returncode == 0 and "env = 'lock'" in check.stdout, check.stderr
    listed = subprocess.run([sys.executable, "-m", "prover_jax.train", "--help"], cwd=tmp_path,
                            env=env, capture_output=True, text=True)
    assert "lock" in listed.stdout.split("Environments:")[1]


def test_without_the_package_the_name_is_unknown(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    check = subprocess.run([sys.executable, "-m", "prover_jax.train", "--env", "lock",
                            "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert check.returncode == 2 and "unknown environment 'lock'" in check.stderr
