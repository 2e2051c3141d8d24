"""Runtime overrides: the ``TORCH_C_DLPACK_EXT_*`` environment variables, read at import
only when one of them is set, and without ever raising.

Every variable shares the one prefix of ``naming.env_var``; this module is imported only
when one of them is set (without any, the loader uses ``Settings()``). Reading them never
raises: a bad value, an unknown name (with a "did you mean ...?" hint) or a
``LIBRARY`` path that does not exist becomes a :class:`SettingProblem`. The selector
turns any problem into "load nothing" and the caller announces it as a
:class:`TorchCDLPackExtWarning`, because an exception out of ``import`` would break
every package that imports this one.

Each variable has one reader (``read_flag``, ``read_backend``, ``read_library``,
``read_cache_dir``, ``read_trusted_owner``, ``read_lock_timeout``) that parses and checks
its value and returns it with its problem, if any; :func:`read_settings` composes them.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

from _torch_c_dlpack_ext_core.errors import ConfigError, TorchCDLPackExtWarning
from _torch_c_dlpack_ext_core.files import file_kind
from _torch_c_dlpack_ext_core.naming import ENV_PREFIX, Backend, env_var, parse_backend

from ._model import SettingProblem, Settings

__all__ = [
    "BUILD_TIME_VARIABLES",
    "RUNTIME_VARIABLES",
    "Reading",
    "TorchCDLPackExtWarning",
    "parse_bool",
    "read_backend",
    "read_cache_dir",
    "read_flag",
    "read_library",
    "read_lock_timeout",
    "read_settings",
    "read_trusted_owner",
    "unknown_variables",
]


#: Variables the runtime reads, by short name (without the prefix).
RUNTIME_VARIABLES = (
    "DISABLE",
    "FORCE",
    "LIBRARY",
    "BACKEND",
    "JIT",
    "CACHE_DIR",
    "TRUSTED_OWNER",
    "LOCK_TIMEOUT",
    "PORTABLE",
)
#: The range ``TORCH_C_DLPACK_EXT_LOCK_TIMEOUT`` accepts, in seconds: a build takes seconds
#: to minutes (docs/facts.md), so less than one second or more than a day is a mistake.
LOCK_TIMEOUT_RANGE = (1.0, 86400.0)
#: Variables the in-tree build backend reads (``build_backend/_options.py``): known, so
#: not reported as typos, but ignored at import. (Developer tools and tests use their own
#: prefix, :data:`_torch_c_dlpack_ext_core.naming.DEV_ENV_PREFIX`.) A test keeps this list
#: in step with the project.
BUILD_TIME_VARIABLES: tuple[str, ...] = (
    "BACKENDS",
    "BUILD_DIR",
    "BUILD_TRACEBACK",
    "LIBS_DIR",
    "TORCH",
    "UNIVERSAL",
    "VARIANT_LABEL",
)

_Value = TypeVar("_Value")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def parse_bool(name: str, value: str) -> bool:
    """Parse a boolean variable's value (1/0, true/false, yes/no, on/off; any case).

    Raises :class:`ConfigError` naming the variable and the accepted spellings.
    """
    folded = value.strip().lower()
    if folded in _TRUE:
        return True
    if folded in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean: use 1/0, true/false, yes/no or on/off")


def _expand_user(raw: str) -> Path:
    """``~`` expanded where it can be: ``~nosuchuser`` (or ``~`` without a home directory)
    makes ``expanduser`` raise RuntimeError, which must not escape the import; the path is
    then taken literally (and fails the checks that follow, with a message)."""
    try:
        return Path(raw).expanduser()
    except RuntimeError:
        return Path(raw)


def _unknown_variable(name: str, short: str, known: tuple[str, ...]) -> str:
    """The message for a prefixed variable that is not one of ours, with the closest
    known name. Environment variables are case-sensitive on POSIX, so ``..._jit`` is
    not ``..._JIT``: the case is folded for the hint only, and said to matter."""
    folded = short.upper()
    if folded in known:
        fix = f"did you mean {env_var(folded)}? The names are case-sensitive"
    else:
        # Compare without the shared prefix, which would make every name "close".
        import difflib  # only for a typo, so not on every import

        hint = difflib.get_close_matches(folded, known, n=1)
        fix = f"did you mean {env_var(hint[0])}?" if hint else "remove it"
    return f"{name} is not a torch-c-dlpack-ext variable ({fix})"


#: Each reader's answer: the setting's value (its default where the variable is unset
#: or invalid) and what is wrong with the variable's value, if anything.
Reading = tuple[_Value, "SettingProblem | None"]


def _shown(raw: str, limit: int) -> str:
    """A value as a message quotes it: at most ``limit`` characters."""
    return raw if len(raw) <= limit else raw[:limit] + "..."


def read_flag(short: str, raw: str | None) -> Reading[bool]:
    """The boolean variable ``short`` (DISABLE, FORCE, JIT, PORTABLE); unset: False."""
    if raw is None:
        return False, None
    try:
        return parse_bool(env_var(short), raw), None
    except ConfigError as exc:
        return False, SettingProblem(env_var(short), str(exc))


def read_backend(raw: str | None) -> Reading[Backend | None]:
    """``BACKEND``: the backend whose library to load instead of torch's own, or None."""
    if raw is None:
        return None, None
    try:
        return parse_backend(raw), None
    except ConfigError as exc:
        return None, SettingProblem(env_var("BACKEND"), f"{env_var('BACKEND')}: {exc}")


def read_library(raw: str | None) -> Reading[Path | None]:
    """``LIBRARY``: the file it names (absolute), or None: unset, or not a regular file
    (then the problem names what it is: missing, a directory, a FIFO, a device...)."""
    if raw is None:
        return None, None
    candidate = _expand_user(raw)
    try:
        # stat(), never open(): a FIFO would block an open. stat() may fail for reasons
        # other than absence (a name too long, a directory that cannot be searched),
        # absolute() with a deleted cwd.
        mode = candidate.stat().st_mode
        if stat.S_ISREG(mode):
            return candidate.absolute(), None
        why = f"is {file_kind(mode)} (not a library file)"
    except FileNotFoundError:
        why = "is not an existing file"
    except OSError as exc:  # strerror: the path again would double a long value
        why = f"cannot be checked ({type(exc).__name__}: {exc.strerror or 'no detail'})"
    except ValueError as exc:
        why = f"cannot be checked ({str(exc)[:200]})"
    name = env_var("LIBRARY")
    message = f"{name}={_shown(raw, 200)!r} {why}: point it at a built library or unset it"
    return None, SettingProblem(name, message)


def read_cache_dir(raw: str | None) -> Reading[Path | None]:
    """``CACHE_DIR``: the JIT cache's directory, which must be absolute, or None."""
    if raw is None:
        return None, None
    candidate = _expand_user(raw)
    if candidate.is_absolute():
        return candidate, None
    # A relative cache follows the current directory: a build would land there, and a
    # later import started there would load whatever that directory holds.
    name = env_var("CACHE_DIR")
    return None, SettingProblem(
        name,
        f"{name}={_shown(raw, 200)!r} is not an absolute path (a cache relative to the "
        "current directory would be loaded from wherever a process starts): give an "
        "absolute path or unset it",
    )


def read_trusted_owner(raw: str | None) -> Reading[int | None]:
    """``TRUSTED_OWNER``: the uid it names (a uid or a user name), or None."""
    if raw is None:
        return None, None
    from _torch_c_dlpack_ext_core.trust import parse_trusted_owner  # only when set

    try:
        return parse_trusted_owner(raw), None
    except ConfigError as exc:
        return None, SettingProblem(env_var("TRUSTED_OWNER"), str(exc))


def read_lock_timeout(raw: str | None) -> Reading[float | None]:
    """``LOCK_TIMEOUT`` in seconds, within :data:`LOCK_TIMEOUT_RANGE`, or None."""
    if raw is None:
        return None, None
    low, high = LOCK_TIMEOUT_RANGE
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if low <= seconds <= high:  # False for nan and inf
        return seconds, None
    name = env_var("LOCK_TIMEOUT")
    return None, SettingProblem(
        name,
        f"{name}={_shown(raw, 40)!r} is not a number of seconds from {low:g} to {high:g}: "
        "give how long a JIT build waits for another process's build of the same library, "
        "or unset it",
    )


def unknown_variables(in_force: Sequence[tuple[str, str]]) -> list[SettingProblem]:
    """A problem for each prefixed variable in ``in_force`` that is not one of ours."""
    known = RUNTIME_VARIABLES + BUILD_TIME_VARIABLES
    return [
        SettingProblem(name, _unknown_variable(name, name[len(ENV_PREFIX) :], known))
        for name, _ in in_force
        if name[len(ENV_PREFIX) :] not in known
    ]


def read_settings(environ: Mapping[str, str]) -> Settings:
    """Read the prefixed variables of ``environ``, each with its reader; never raises.

    Empty values count as unset, so ``VAR=`` in a shell script clears an override. The
    problems are listed unknown names first, then in the order the readers run.
    """
    in_force = tuple(sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIX)))
    problems = unknown_variables(in_force)

    def read(short: str, reader: Callable[[str | None], Reading[_Value]]) -> _Value:
        value, problem = reader(environ.get(env_var(short), "").strip() or None)
        if problem is not None:
            problems.append(problem)
        return value

    backend = read("BACKEND", read_backend)
    library = read("LIBRARY", read_library)
    cache_dir = read("CACHE_DIR", read_cache_dir)
    trusted_owner = read("TRUSTED_OWNER", read_trusted_owner)
    lock_timeout = read("LOCK_TIMEOUT", read_lock_timeout)
    disable, force, jit, portable = (
        read(short, partial(read_flag, short)) for short in ("DISABLE", "FORCE", "JIT", "PORTABLE")
    )
    return Settings(
        disable=disable,
        force=force,
        library=library,
        backend=backend,
        jit=jit,
        cache_dir=cache_dir,
        trusted_owner=trusted_owner,
        lock_timeout=lock_timeout,
        portable=portable,
        problems=tuple(problems),
        in_force=in_force,
    )


def settings_of(environ: Mapping[str, str]) -> Settings:
    """The runtime settings in ``environ``: ``Settings()`` when no ``TORCH_C_DLPACK_EXT_*``
    variable is set (the common case parses nothing), else :func:`read_settings`."""
    if not any(name.startswith(ENV_PREFIX) for name in environ):
        return Settings()
    return read_settings(environ)
