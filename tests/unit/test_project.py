"""Project-level invariants: the Quick start (CONTRIBUTING.md), the test command README
names and CI run the same test command, and CI lints first."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.unit.test_readme_pages import source_url

ROOT = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list[str]:
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = contributing.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh|console)?\n(.*?)```", section, re.S)
    assert block is not None, "CONTRIBUTING.md's Quick start has no code block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def _readme_test_command() -> str:
    """The test command README's contributor paragraph names: "`<command>` is the test
    command CI runs"."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = re.findall(r"`([^`]+)` is the test\s+command CI runs", readme)
    assert len(named) == 1, f"README names {len(named)} test commands: {named}"
    return named[0]


def test_the_quick_start_is_the_first_section_of_contributing() -> None:
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", contributing, re.M)
    assert headings[0] == "Quick start", headings


def test_quick_start_has_exactly_venv_build_and_test_commands() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 3, commands
    # A venv first: a system Python refuses `pip install` under PEP 668.
    assert commands[0].startswith("python3 -m venv ")
    assert commands[1].startswith("python -m pip install nox uv")
    assert commands[1].endswith("nox -s build")
    assert commands[2] == "nox -s tests"


def test_readme_names_the_quick_starts_test_command_and_links_it() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _readme_test_command() == _quick_start_commands()[-1]
    assert f"{source_url()}/blob/main/CONTRIBUTING.md#quick-start" in readme


def test_ci_runs_lint_then_exactly_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [
        line.strip()
        for line in script.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    test_command = _readme_test_command()
    assert test_command == _quick_start_commands()[-1]
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
