"""README.md is the user's page (and the PyPI page); maintainers' runbooks live in docs/.

README stays short, links the docs with absolute URLs into the repository pyproject.toml
declares (PyPI breaks relative links), every link lands on a file that exists, and its
settings table lists every ``TORCH_C_DLPACK_EXT_*`` variable the runtime reads.
CONTRIBUTING.md lists the runbooks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9 and 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The runbooks README and CONTRIBUTING.md point to.
RUNBOOKS = ("building", "releasing", "rehearsals", "aarch64", "gpu-check", "benchmarks")
#: Markdown links: ``[text](target)``, ``<https://...>`` and ``[ref]: target`` definitions.
LINK = re.compile(r"\]\(([^)\s]+)\)|<(https?://[^>\s]+)>|^\[[^\]]+\]: *(\S+)", re.M)


def source_url() -> str:
    """The repository URL pyproject.toml declares (``[project.urls] Source``)."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        url: str = tomllib.load(file)["project"]["urls"]["Source"]
    return url.rstrip("/")


def _links(text: str) -> list[str]:
    return [a or b or c for a, b, c in LINK.findall(text)]


def test_every_reference_link_of_readme_is_defined() -> None:
    used = set(re.findall(r"\]\[([^\]]+)\]", README))
    defined = set(re.findall(r"^\[([^\]]+)\]: ", README, re.M))
    assert used, "README links the docs"
    assert used == defined


def test_readme_is_a_short_user_page() -> None:
    assert len(README.splitlines()) <= 200
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[0] == "Which torch gets which path", headings
    for heading in ("Install", "Settings", "Diagnostics", "Limits"):
        assert heading in headings, headings
    # Runbooks are maintainers' pages: none of their commands is on the user's page.
    for command in ("nox -s release", "nox -s rehearse", "git tag", "python -m devtools"):
        assert command not in README, command


def test_readme_links_are_absolute_and_point_at_files_that_exist() -> None:
    links = _links(README)
    relative = [link for link in links if not link.startswith("https://")]
    assert relative == [], "PyPI breaks relative links: use absolute URLs"
    prefixes = (f"{source_url()}/blob/main/", f"{source_url()}/tree/main/")
    for link in links:
        if not link.startswith(prefixes):
            assert link == source_url(), link
            continue
        path = link.split("/main/", 1)[1].split("#", 1)[0]
        assert (ROOT / path).exists(), link
    linked = {link.split("/main/", 1)[1].split("#", 1)[0] for link in links if "/main/" in link}
    assert {f"docs/{name}.md" for name in RUNBOOKS} <= linked, linked


def test_contributing_lists_every_runbook_and_each_exists() -> None:
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    targets = set(_links(contributing.split("\n## Runbooks", 1)[1].split("\n## ", 1)[0]))
    for target in targets:
        assert (ROOT / target).is_file(), target
    assert {f"docs/{name}.md" for name in RUNBOOKS} <= targets, targets


def test_docs_link_only_to_files_that_exist() -> None:
    for page in (ROOT / "docs").glob("*.md"):
        for link in _links(page.read_text(encoding="utf-8")):
            if "://" in link or link.startswith("#"):
                continue
            assert (page.parent / link.split("#", 1)[0]).exists(), f"{page.name}: {link}"


def test_readme_settings_table_lists_every_runtime_variable() -> None:
    from torch_c_dlpack_ext._settings import RUNTIME_VARIABLES

    settings = README.split("\n## Settings", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([A-Z_]+)=", settings, re.M)
    assert sorted(listed) == sorted(RUNTIME_VARIABLES)
