"""The install: pyproject.toml declares ranges a user's environment can share, and
constraints.txt the exact versions CI and `make` install, each inside its range."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pinned() -> dict[str, str]:
    """constraints.txt as {canonical name: version}."""
    lines = [line.split("#")[0].strip()
             for line in (ROOT / "constraints.txt").read_text().splitlines()]
    return {canonicalize_name(name): version
            for name, version in (line.split("==") for line in lines if line)}


def requirements() -> list[Requirement]:
    """The base install's and every extra's requirements, but the project's own extras."""
    listed = [*PROJECT["dependencies"],
              *(r for extra in PROJECT["optional-dependencies"].values() for r in extra)]
    return [r for r in map(Requirement, listed) if canonicalize_name(r.name) != "prover-jax"]


def test_the_base_install_declares_ranges_not_pins():
    for requirement in map(Requirement, PROJECT["dependencies"]):
        operators = {spec.operator for spec in requirement.specifier}
        assert operators == {">=", "<"}, f"{requirement}: a range with both bounds"


def test_every_requirement_is_pinned_inside_its_range():
    versions = pinned()
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        assert name in versions, f"{requirement.name} is not in constraints.txt"
        assert requirement.specifier.contains(versions[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={versions[name]}, outside {requirement}")


def test_make_installs_the_pinned_versions():
    makefile = (ROOT / "Makefile").read_text()
    installs = re.findall(r"^\t(\$\(\w+\)) (-e .*)$", makefile, flags=re.MULTILINE)
    assert installs and all(command == "$(PIP)" for command, _ in installs)
    assert re.search(r"^PIP := .* -c constraints\.txt$", makefile, flags=re.MULTILINE)
