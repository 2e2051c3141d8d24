"""read_settings: strict parsing, announced problems, never an exception."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import Backend
from torch_c_dlpack_ext._decide import Settings
from torch_c_dlpack_ext._settings import (
    RUNTIME_VARIABLES,
    Reading,
    parse_bool,
    read_backend,
    read_cache_dir,
    read_flag,
    read_library,
    read_lock_timeout,
    read_settings,
    read_trusted_owner,
)

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
    sources = [root / name for name in ("noxfile.py", "pyproject.toml", "README.md")]
    sources.append(root / "CONTRIBUTING.md")
    for folder in ("python", "devtools", "tests", "benchmarks", "build_backend", ".github", "docs"):
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


#: The end of every boolean's message, the start of LOCK_TIMEOUT's bounds.
BOOLEAN = " is not a boolean: use 1/0, true/false, yes/no or on/off"
SECONDS = " is not a number of seconds from 1 to 86400: give how long a JIT build waits for"
RELATIVE = " is not an absolute path (a cache relative to the current directory would be"

#: Per variable: unset, empty, blank, valid and invalid values; the field it sets, the
#: value read (the default where unset or invalid) and the start of its problem's message
#: after ``NAME=value`` (None: no problem). ``{tmp}`` is a temporary directory holding
#: ``lib.so``.
READINGS = [
    *(
        case
        for short, field in [
            ("DISABLE", "disable"),
            ("FORCE", "force"),
            ("JIT", "jit"),
            ("PORTABLE", "portable"),
        ]
        for case in [
            (short, None, field, False, None),
            (short, "", field, False, None),
            (short, "  ", field, False, None),
            (short, " Yes ", field, True, None),
            (short, "off", field, False, None),
            (short, "2", field, False, "='2'" + BOOLEAN),
            (short, "enable", field, False, "='enable'" + BOOLEAN),
        ]
    ),
    ("BACKEND", None, "backend", None, None),
    ("BACKEND", "", "backend", None, None),
    ("BACKEND", " CUDA ", "backend", Backend.CUDA, None),
    ("BACKEND", "rocm", "backend", Backend.ROCM, None),
    ("BACKEND", "metal", "backend", None, ": unknown backend 'metal': expected one of cpu, "),
    ("LIBRARY", None, "library", None, None),
    ("LIBRARY", " ", "library", None, None),
    ("LIBRARY", "{tmp}/lib.so", "library", "{tmp}/lib.so", None),
    ("LIBRARY", "{tmp}/nope.so", "library", None, "='{tmp}/nope.so' is not an existing file"),
    ("LIBRARY", "{tmp}", "library", None, "='{tmp}' is a directory (not a library file)"),
    ("CACHE_DIR", None, "cache_dir", None, None),
    ("CACHE_DIR", "", "cache_dir", None, None),
    ("CACHE_DIR", "{tmp}/cache", "cache_dir", "{tmp}/cache", None),
    ("CACHE_DIR", "rel/cache", "cache_dir", None, "='rel/cache'" + RELATIVE),
    ("TRUSTED_OWNER", None, "trusted_owner", None, None),
    ("TRUSTED_OWNER", "", "trusted_owner", None, None),
    ("TRUSTED_OWNER", "0", "trusted_owner", 0, None),
    ("TRUSTED_OWNER", "root", "trusted_owner", 0, None),
    ("TRUSTED_OWNER", "-1", "trusted_owner", None, "='-1' names no account on this system"),
    ("LOCK_TIMEOUT", None, "lock_timeout", None, None),
    ("LOCK_TIMEOUT", "", "lock_timeout", None, None),
    ("LOCK_TIMEOUT", "1", "lock_timeout", 1.0, None),
    ("LOCK_TIMEOUT", " 2.5 ", "lock_timeout", 2.5, None),
    ("LOCK_TIMEOUT", "86400", "lock_timeout", 86400.0, None),
    ("LOCK_TIMEOUT", "0.5", "lock_timeout", None, "='0.5'" + SECONDS),
    ("LOCK_TIMEOUT", "86401", "lock_timeout", None, "='86401'" + SECONDS),
    ("LOCK_TIMEOUT", "nan", "lock_timeout", None, "='nan'" + SECONDS),
    ("LOCK_TIMEOUT", "inf", "lock_timeout", None, "='inf'" + SECONDS),
    ("LOCK_TIMEOUT", "abc", "lock_timeout", None, "='abc'" + SECONDS),
    ("LOCK_TIMEOUT", "9" * 50, "lock_timeout", None, "='" + "9" * 40 + "...'" + SECONDS),
]


@pytest.mark.parametrize(
    ("short", "raw", "field", "value", "problem"),
    READINGS,
    ids=[f"{case[0]}={case[1]!r}" for case in READINGS],
)
def test_each_variable_reads_as_the_table_says(
    tmp_path: Path, short: str, raw: str | None, *, field: str, value: object, problem: str | None
) -> None:
    """Every variable alone: unset, empty or blank (unset), valid and invalid values, the
    value it gives its setting and the exact start of its problem's message."""
    (tmp_path / "lib.so").write_bytes(b"x")

    def filled(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path))

    environ = {} if raw is None else {P + short: filled(raw)}
    settings = read_settings(environ)
    expected = Path(filled(value)) if type(value) is str else value
    assert getattr(settings, field) == expected
    assert type(getattr(settings, field)) is type(expected)
    if problem is None:
        assert settings.problems == ()
    else:
        (found,) = settings.problems
        assert found.variable == P + short
        assert found.message.startswith(P + short + filled(problem)), found.message
    # Every other setting keeps its default.
    others = set(Settings._fields) - {field, "problems", "in_force"}
    assert all(getattr(settings, name) == getattr(Settings(), name) for name in others)


#: The reader of each variable, given its value (stripped; None where unset or empty).
READERS: dict[str, Callable[[str | None], Reading[object]]] = {
    **{short: partial(read_flag, short) for short in ("DISABLE", "FORCE", "JIT", "PORTABLE")},
    "BACKEND": read_backend,
    "LIBRARY": read_library,
    "CACHE_DIR": read_cache_dir,
    "TRUSTED_OWNER": read_trusted_owner,
    "LOCK_TIMEOUT": read_lock_timeout,
}


@pytest.mark.parametrize(
    ("short", "raw", "field", "value", "problem"),
    READINGS,
    ids=[f"{case[0]}={case[1]!r}" for case in READINGS],
)
def test_each_reader_gives_what_read_settings_gives(
    tmp_path: Path, short: str, raw: str | None, *, field: str, value: object, problem: str | None
) -> None:
    """Each variable's reader alone: its value and its problem, never an exception; what
    read_settings composes."""
    (tmp_path / "lib.so").write_bytes(b"x")
    text = None if raw is None else raw.replace("{tmp}", str(tmp_path)).strip() or None
    read, found = READERS[short](text)
    settings = read_settings({} if text is None else {P + short: text})
    assert read == getattr(settings, field)
    assert (found,) == settings.problems if problem else found is None


def test_problems_come_unknown_names_first_then_in_the_readers_order() -> None:
    """The order the warning lists them in: unknown names (sorted), then BACKEND,
    LIBRARY, CACHE_DIR, TRUSTED_OWNER, LOCK_TIMEOUT, DISABLE, FORCE, JIT, PORTABLE."""
    order = ["BACKEND", "LIBRARY", "CACHE_DIR", "TRUSTED_OWNER", "LOCK_TIMEOUT"]
    order += ["DISABLE", "FORCE", "JIT", "PORTABLE"]
    bad = dict.fromkeys(order, "x") | {"TRUSTED_OWNER": "-1", "LIBRARY": "/nonexistent"}
    environ = {P + short: value for short, value in reversed(bad.items())}
    environ |= {P + "ZZ": "1", P + "AAA": "1"}
    problems = read_settings(environ).problems
    assert [p.variable.removeprefix(P) for p in problems] == ["AAA", "ZZ", *order]
