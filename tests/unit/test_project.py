"""Project-level invariants: the README's Quick start and CI run the same test command,
and CI lints first."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh|console)?\n(.*?)```", section, re.S)
    assert block is not None, "README Quick start has no code block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_has_exactly_venv_build_and_test_commands() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 3, commands
    # A venv first: a system Python refuses `pip install` under PEP 668.
    assert commands[0].startswith("python3 -m venv ")
    assert commands[1].startswith("python -m pip install nox uv")
    assert commands[1].endswith("nox -s build")
    assert commands[2] == "nox -s tests"


def test_ci_runs_lint_then_exactly_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [
        line.strip()
        for line in script.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    test_command = _quick_start_commands()[-1]
    runs = [line for line in lines if shlex.split(line)[:2] == ["nox", "-s"]]
    assert runs == ["nox -s lint", test_command], f".ci/run runs {runs}"


def test_version_has_one_source() -> None:
    hits = [
        path.relative_to(ROOT)
        for path in (ROOT / "python").rglob("*.py")
        if re.search(r"^__version__\s*=", path.read_text(encoding="utf-8"), re.M)
    ]
    assert hits == [Path("python/_torch_c_dlpack_ext_core/version.py")]


def test_facts_are_cited_from_the_repository() -> None:
    """Code comments cite docs/facts.md, which is in the repository; nothing cites a
    facts file from outside it."""
    assert (ROOT / "docs" / "facts.md").is_file()
    offenders = []
    for folder in (".", "python", "build_backend", "devtools", "tests", "benchmarks", "csrc"):
        for path in (ROOT / folder).glob("*" if folder == "." else "**/*"):
            if path.suffix in {".py", ".toml", ".md", ".cc", ".h", ".yml", ".cjs"}:
                text = path.read_text(encoding="utf-8", errors="replace")
                if "FACTS.md" in text and path.name != "test_project.py":
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
    cited = (ROOT / "matrix.toml").read_text(encoding="utf-8")
    assert "docs/facts.md" in cited
