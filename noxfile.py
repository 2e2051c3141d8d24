"""Developer and release tasks for torch-c-dlpack-ext.

Every step CI and the release workflow run is a session here, so it can be run
(and debugged) on a developer machine the same way.
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")

nox.needs_version = ">=2024.10.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]


def _group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


@nox.session(venv_backend="virtualenv")
def tests(session: nox.Session) -> None:
    """Unit and integration tests (real compiles, real torch 2.4-2.9 and 2.13).

    pip (not uv) installs this session so that machine-wide pip settings (local
    wheel folders, caps) apply to the torch 2.13 it tests against. Old torch
    releases are provisioned by the tests themselves into cached uv environments.
    Pass pytest arguments after ``--``.
    """
    session.install("torch==2.13.0", "packaging", "filelock", *_group("test"))
    session.run("pytest", *(session.posargs or ["tests"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) and mypy --strict on the package."""
    session.install(*_group("lint"), "packaging", "filelock")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
