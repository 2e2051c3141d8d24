"""Runtime overrides: the ``TORCH_C_DLPACK_EXT_*`` environment variables read at import.

Every variable shares the one prefix of ``naming.env_var``; this module is imported only
when one of them is set (without any, the loader uses ``Settings()``). Reading them never
raises: a bad value, an unknown name (with a "did you mean ...?" hint) or a
``LIBRARY`` path that does not exist becomes a :class:`SettingProblem`. The selector
turns any problem into "load nothing" and the caller announces it as a
:class:`TorchCDLPackExtWarning`, because an exception out of ``import`` would break
every package that imports this one.
"""

from __future__ import annotations

import stat
from collections.abc import Mapping
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError, TorchCDLPackExtWarning
from _torch_c_dlpack_ext_core.manifest import file_kind
from _torch_c_dlpack_ext_core.naming import ENV_PREFIX, Backend, env_var, parse_backend

from ._decide import SettingProblem, Settings

__all__ = [
    "BUILD_TIME_VARIABLES",
    "RUNTIME_VARIABLES",
    "TorchCDLPackExtWarning",
    "parse_bool",
    "read_settings",
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


def _trusted_owner(raw: str | None, problems: list[SettingProblem]) -> int | None:
    """The uid ``TRUSTED_OWNER`` names (a uid or a user name), or ``None``."""
    if raw is None:
        return None
    from _torch_c_dlpack_ext_core.trust import parse_trusted_owner  # only when set

    try:
        return parse_trusted_owner(raw)
    except ConfigError as exc:
        problems.append(SettingProblem(env_var("TRUSTED_OWNER"), str(exc)))
        return None


def _lock_timeout(raw: str | None, problems: list[SettingProblem]) -> float | None:
    """``LOCK_TIMEOUT`` in seconds, within :data:`LOCK_TIMEOUT_RANGE`, or ``None``."""
    if raw is None:
        return None
    low, high = LOCK_TIMEOUT_RANGE
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if low <= seconds <= high:  # False for nan and inf
        return seconds
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    problems.append(
        SettingProblem(
            env_var("LOCK_TIMEOUT"),
            f"{env_var('LOCK_TIMEOUT')}={shown!r} is not a number of seconds from {low:g} to "
            f"{high:g}: give how long a JIT build waits for another process's build of the "
            "same library, or unset it",
        )
    )
    return None


def _library(raw: str | None, problems: list[SettingProblem]) -> Path | None:
    """The file ``LIBRARY`` names (absolute), or ``None``: unset, or not a regular file
    (then a problem names what it is: missing, a directory, a FIFO, a device...)."""
    if raw is None:
        return None
    candidate = _expand_user(raw)
    shown = raw if len(raw) <= 200 else raw[:200] + "..."
    library: Path | None = None
    try:
        # stat(), never open(): a FIFO would block an open. stat() may fail for reasons
        # other than absence (a name too long, a directory that cannot be searched),
        # absolute() with a deleted cwd.
        mode = candidate.stat().st_mode
        library = candidate.absolute() if stat.S_ISREG(mode) else None
        why = f"is {file_kind(mode)} (not a library file)"
    except FileNotFoundError:
        why = "is not an existing file"
    except OSError as exc:  # strerror: the path again would double a long value
        why = f"cannot be checked ({type(exc).__name__}: {exc.strerror or 'no detail'})"
    except ValueError as exc:
        why = f"cannot be checked ({str(exc)[:200]})"
    if library is None:
        problems.append(
            SettingProblem(
                env_var("LIBRARY"),
                f"{env_var('LIBRARY')}={shown!r} {why}: point it at a built library or unset it",
            )
        )
    return library


def read_settings(environ: Mapping[str, str]) -> Settings:
    """Read the prefixed variables of ``environ``; never raises.

    Empty values count as unset, so ``VAR=`` in a shell script clears an override.
    """
    problems: list[SettingProblem] = []
    in_force = tuple(sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIX)))
    known = RUNTIME_VARIABLES + BUILD_TIME_VARIABLES
    for name, _ in in_force:
        short = name[len(ENV_PREFIX) :]
        if short not in known:
            problems.append(SettingProblem(name, _unknown_variable(name, short, known)))

    def value_of(short: str) -> str | None:
        value = environ.get(env_var(short), "").strip()
        return value or None

    def flag(short: str) -> bool:
        raw = value_of(short)
        if raw is None:
            return False
        try:
            return parse_bool(env_var(short), raw)
        except ConfigError as exc:
            problems.append(SettingProblem(env_var(short), str(exc)))
            return False

    backend: Backend | None = None
    raw_backend = value_of("BACKEND")
    if raw_backend is not None:
        try:
            backend = parse_backend(raw_backend)
        except ConfigError as exc:
            problems.append(SettingProblem(env_var("BACKEND"), f"{env_var('BACKEND')}: {exc}"))

    library = _library(value_of("LIBRARY"), problems)

    cache_dir: Path | None = None
    raw_cache = value_of("CACHE_DIR")
    if raw_cache is not None:
        candidate = _expand_user(raw_cache)
        if candidate.is_absolute():
            cache_dir = candidate
        else:
            # A relative cache follows the current directory: a build would land there,
            # and a later import started there would load whatever that directory holds.
            shown = raw_cache if len(raw_cache) <= 200 else raw_cache[:200] + "..."
            problems.append(
                SettingProblem(
                    env_var("CACHE_DIR"),
                    f"{env_var('CACHE_DIR')}={shown!r} is not an absolute path (a cache "
                    "relative to the current directory would be loaded from wherever a "
                    "process starts): give an absolute path or unset it",
                )
            )
    trusted_owner = _trusted_owner(value_of("TRUSTED_OWNER"), problems)
    lock_timeout = _lock_timeout(value_of("LOCK_TIMEOUT"), problems)
    return Settings(
        disable=flag("DISABLE"),
        force=flag("FORCE"),
        library=library,
        backend=backend,
        jit=flag("JIT"),
        cache_dir=cache_dir,
        trusted_owner=trusted_owner,
        lock_timeout=lock_timeout,
        portable=flag("PORTABLE"),
        problems=tuple(problems),
        in_force=in_force,
    )
