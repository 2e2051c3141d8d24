"""read_settings: strict parsing, announced problems, never an exception."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import Backend
from torch_c_dlpack_ext._decide import Settings
from torch_c_dlpack_ext._settings import RUNTIME_VARIABLES, parse_bool, read_settings

P = "TORCH_C_DLPACK_EXT_"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        (" On ", True),
        ("0", False),
        ("False", False),
        ("no", False),
        ("off", False),
    ],
)
def test_parse_bool_accepts_documented_spellings(raw: str, expected: bool) -> None:
    assert parse_bool("X", raw) is expected


@pytest.mark.parametrize("raw", ["2", "maybe", "y", "enable"])
def test_parse_bool_rejects_others_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"X=.* is not a boolean: use 1/0"):
        parse_bool("X", raw)


def test_empty_environment_gives_defaults() -> None:
    settings = read_settings({"PATH": "/bin"})
    assert settings == Settings()
    assert settings.problems == ()


def test_all_variables_parsed(tmp_path: Path) -> None:
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"x")
    settings = read_settings(
        {
            P + "DISABLE": "no",
            P + "FORCE": "yes",
            P + "LIBRARY": str(lib),
            P + "BACKEND": "ROCm",
            P + "JIT": "1",
            P + "CACHE_DIR": str(tmp_path / "cache"),
            P + "PORTABLE": "on",
        }
    )
    assert settings.problems == ()
    assert (settings.disable, settings.force, settings.jit) == (False, True, True)
    assert settings.portable is True
    assert settings.library == lib
    assert settings.backend is Backend.ROCM
    assert settings.cache_dir == tmp_path / "cache"
    assert [name for name, _ in settings.in_force] == sorted(
        P + n for n in ("DISABLE", "FORCE", "LIBRARY", "BACKEND", "JIT", "CACHE_DIR", "PORTABLE")
    )


def test_empty_value_counts_as_unset() -> None:
    settings = read_settings({P + "BACKEND": "", P + "LIBRARY": " ", P + "JIT": ""})
    assert settings.problems == ()
    assert settings.backend is None
    assert settings.library is None
    assert settings.jit is False


def test_unknown_variable_gets_did_you_mean() -> None:
    settings = read_settings({P + "DISABEL": "1"})
    (problem,) = settings.problems
    assert problem.variable == P + "DISABEL"
    assert f"did you mean {P}DISABLE?" in problem.message
    # A typo must not be half-honoured either.
    assert settings.disable is False


def test_unknown_variable_without_close_match() -> None:
    (problem,) = read_settings({P + "ZZZZZZZZZZZZ": "1"}).problems
    assert "is not a torch-c-dlpack-ext variable (remove it)" in problem.message


def test_bad_boolean_is_a_problem_not_an_exception() -> None:
    settings = read_settings({P + "FORCE": "sure"})
    (problem,) = settings.problems
    assert problem.variable == P + "FORCE"
    assert "'sure' is not a boolean" in problem.message
    assert settings.force is False


def test_bad_backend_names_choices() -> None:
    settings = read_settings({P + "BACKEND": "metal"})
    (problem,) = settings.problems
    assert problem.variable == P + "BACKEND"
    assert "expected one of cpu, cuda, rocm" in problem.message
    assert settings.backend is None


def test_missing_library_path_is_a_problem(tmp_path: Path) -> None:
    settings = read_settings({P + "LIBRARY": str(tmp_path / "nope.so")})
    (problem,) = settings.problems
    assert problem.variable == P + "LIBRARY"
    assert "is not an existing file" in problem.message
    assert settings.library is None


def test_several_problems_all_reported() -> None:
    settings = read_settings({P + "JIT": "x", P + "BACKEND": "y", P + "NOPE": "1"})
    assert sorted(p.variable for p in settings.problems) == [
        P + "BACKEND",
        P + "JIT",
        P + "NOPE",
    ]


def test_runtime_variables_are_the_documented_set() -> None:
    assert set(RUNTIME_VARIABLES) == {
        "DISABLE",
        "FORCE",
        "LIBRARY",
        "BACKEND",
        "JIT",
        "CACHE_DIR",
        "TRUSTED_OWNER",
        "LOCK_TIMEOUT",
        "PORTABLE",
    }


def test_every_project_variable_is_known_to_the_runtime() -> None:
    """A prefixed variable the runtime does not know makes import refuse to load (it
    looks like a typo), so every one the project uses anywhere must be listed."""
    import re

    from torch_c_dlpack_ext._settings import BUILD_TIME_VARIABLES

    root = Path(__file__).resolve().parents[2]
    sources = [root / "noxfile.py", root / "pyproject.toml", root / "README.md"]
    for folder in ("python", "devtools", "tests", "benchmarks", "build_backend", ".github"):
        sources.extend(
            p for p in (root / folder).rglob("*") if p.suffix in {".py", ".yml", ".toml", ".md"}
        )
    pattern = re.compile(r"TORCH_C_DLPACK_EXT_([A-Z0-9_]*[A-Z0-9])|env_var\(\"([A-Z0-9_]+)\"\)")
    used = set()
    for path in sources:
        if path.is_file():
            for match in pattern.finditer(path.read_text(encoding="utf-8", errors="replace")):
                used.add(match.group(1) or match.group(2))
    # The build backend derives its variables from its settings' field names.
    from build_backend._options import BackendOptions

    used.update(f.name.upper() for f in dataclasses.fields(BackendOptions))
    # Names tests use on purpose as typos / unknowns.
    deliberate = {"DISABEL", "BAKEND", "BACKNED", "NOPE", "ZZZZZZZZZZZZ"}
    unknown = used - set(RUNTIME_VARIABLES) - set(BUILD_TIME_VARIABLES) - deliberate
    assert unknown == set(), f"add to _settings.BUILD_TIME_VARIABLES: {sorted(unknown)}"


@pytest.mark.parametrize(
    "value", ["/" + "x" * 5000, "/" + "y" * 300 + "/lib.so"], ids=["path", "component"]
)
def test_library_path_that_cannot_be_stat_ed_is_a_problem(value: str) -> None:
    """stat() failing otherwise than "absent" (here ENAMETOOLONG) is a bad setting naming
    the variable, not an exception out of read_settings (which the import would report as an
    internal failure)."""
    settings = read_settings({"TORCH_C_DLPACK_EXT_LIBRARY": value})
    assert settings.library is None
    (problem,) = settings.problems
    assert problem.variable == "TORCH_C_DLPACK_EXT_LIBRARY"
    assert "cannot be checked" in problem.message
    assert "unset it" in problem.message
    assert len(problem.message) < 400, problem.message


@pytest.mark.parametrize(
    ("name", "meant"), [("jit", "JIT"), ("Force", "FORCE"), ("cache_dir", "CACHE_DIR")]
)
def test_mis_cased_variable_gets_did_you_mean(name: str, meant: str) -> None:
    # Environment variables are case-sensitive on POSIX: a hint, never a silent honour.
    settings = read_settings({P + name: "1"})
    (problem,) = settings.problems
    assert problem.variable == P + name
    assert f"did you mean {P}{meant}? The names are case-sensitive" in problem.message
    assert settings.jit is False
    assert settings.force is False


def test_mis_cased_typo_still_gets_the_closest_name() -> None:
    (problem,) = read_settings({P + "disabel": "1"}).problems
    assert f"did you mean {P}DISABLE?" in problem.message


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (os.mkfifo, "is a FIFO (not a library file)"),
        (lambda path: path.mkdir(), "is a directory (not a library file)"),
        (None, "is a character device (not a library file)"),
    ],
    ids=["fifo", "directory", "dev-null"],
)
def test_a_library_path_that_is_no_file_says_what_it_is(
    tmp_path: Path, make: Callable[[Path], object] | None, kind: str
) -> None:
    """Named by what it is (issue 31, item 10), never opened: opening a FIFO would block."""
    if make is None:
        path = Path(os.devnull)
    else:
        path = tmp_path / "lib.so"
        make(path)
    settings = read_settings({P + "LIBRARY": str(path)})
    (problem,) = settings.problems
    assert f"{P}LIBRARY={str(path)!r} {kind}" in problem.message, problem.message
    assert settings.library is None


def test_portable_is_a_boolean_setting() -> None:
    """Issue 30: TORCH_C_DLPACK_EXT_PORTABLE forces the portable table; a bad value is a
    problem (loads nothing), never a silent default."""
    assert read_settings({}).portable is False
    assert read_settings({P + "PORTABLE": "0"}).portable is False
    bad = read_settings({P + "PORTABLE": "portable"})
    assert bad.portable is False
    assert [p.variable for p in bad.problems] == [P + "PORTABLE"]
