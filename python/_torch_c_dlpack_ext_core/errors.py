"""Every error this package raises, one subclass per failure category.

Each error carries a message that says what went wrong *and* how to fix it. The
command-line entry points translate them at the boundary (``raise ... from None``
with a stable exit code), so users see one clear line instead of a traceback
unless they ask for it.
"""

from __future__ import annotations

__all__ = [
    "ABIAuditError",
    "ABIMismatchError",
    "BackendUnavailableError",
    "BuildError",
    "CommandError",
    "CommandTimeoutError",
    "CompilerNotFoundError",
    "ConfigError",
    "DLPackHeaderNotFoundError",
    "GPUHeadersNotFoundError",
    "InvalidBackendError",
    "LibraryLoadError",
    "ManifestError",
    "TorchCDLPackExtError",
    "TorchCDLPackExtWarning",
    "TorchInstallError",
    "brief",
]

#: How to repair a damaged installation (named once in any message that needs it).
REINSTALL = (
    "reinstall torch-c-dlpack-ext: pip install --force-reinstall --no-deps torch-c-dlpack-ext"
)


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to about ``limit`` characters, for messages: a 5,000-character
    file name or a deeply nested JSON value from a damaged manifest must not be echoed whole
    (and must not make the message itself fail)."""
    import reprlib  # error paths only

    shortener = reprlib.Repr()
    shortener.maxstring = shortener.maxother = limit
    shortener.maxlevel, shortener.maxlist, shortener.maxdict = 2, 4, 4
    text = shortener.repr(value)
    if isinstance(value, (str, bytes)) and len(value) > limit:
        text += f" ({len(value)} characters)"
    return text


class TorchCDLPackExtWarning(UserWarning):
    """Category of every warning torch-c-dlpack-ext emits (filter on it to silence them)."""


class TorchCDLPackExtError(Exception):
    """Base class of every error raised by torch-c-dlpack-ext."""

    #: Stable process exit code used by the command-line entry points.
    exit_code: int = 1


class ConfigError(TorchCDLPackExtError, ValueError):
    """A setting (environment variable, config setting, argument) has a bad value."""

    exit_code = 2


class InvalidBackendError(ConfigError):
    """A backend name that is not one of ``cpu``, ``cuda``, ``rocm``."""


class TorchInstallError(TorchCDLPackExtError):
    """A path that should hold a torch installation does not (or it is unreadable)."""

    exit_code = 3


class BackendUnavailableError(TorchInstallError):
    """A backend whose libraries the torch installation lacks (CUDA on a CPU-only torch)."""


class ABIMismatchError(TorchCDLPackExtError):
    """A requested C++ ABI (or version) contradicts what the torch installation uses."""

    exit_code = 4


class BuildError(TorchCDLPackExtError):
    """Compiling or linking the exchange library failed.

    When a compiler run failed, ``command`` is its argv and ``output`` its
    captured diagnostics; both are empty otherwise.
    """

    exit_code = 5

    def __init__(self, message: str, *, command: list[str] | None = None, output: str = "") -> None:
        super().__init__(message)
        self.command = command or []
        self.output = output

    @classmethod
    def from_command(cls, what: str, failed: CommandError, *, tail: int) -> BuildError:
        """``what`` failed because ``failed``, a command it ran, exited non-zero: the message
        ends with the last ``tail`` characters of its diagnostics; ``command`` and ``output``
        keep them whole."""
        output = failed.stderr or failed.stdout
        return cls(
            f"{what} (exit {failed.returncode}):\n{output.strip()[-tail:]}",
            command=failed.cmd,
            output=output,
        )


class CompilerNotFoundError(BuildError):
    """No usable C++ compiler was found."""


class DLPackHeaderNotFoundError(BuildError):
    """No DLPack >= 1.2 header is available to compile against."""


class GPUHeadersNotFoundError(BuildError):
    """A CUDA or ROCm build was requested but the toolkit headers were not found."""


class ABIAuditError(BuildError):
    """A built library needs dynamic symbols its target torch does not provide."""

    def __init__(self, message: str, missing: tuple[str, ...]) -> None:
        super().__init__(message)
        self.missing = missing


class CommandError(TorchCDLPackExtError):
    """A subprocess exited with a non-zero status."""

    exit_code = 6

    def __init__(self, cmd: list[str], returncode: int, stdout: str, stderr: str) -> None:
        self.cmd = cmd
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = (stderr or stdout).strip()
        if len(tail) > 4000:
            tail = "...\n" + tail[-4000:]
        super().__init__(
            f"command failed with exit code {returncode}: {' '.join(cmd)}"
            + (f"\n{tail}" if tail else "")
        )


class CommandTimeoutError(CommandError):
    """A subprocess ran longer than its time limit and was killed."""

    def __init__(self, cmd: list[str], timeout: float, stdout: str, stderr: str) -> None:
        super().__init__(cmd, -9, stdout, (stderr + f"\ntimed out after {timeout:g} s").strip())
        self.timeout = timeout


class _CauseAndRemedy(TorchCDLPackExtError):
    """An error whose message is ``"<cause>; <remedy>"``, with both parts kept apart so a
    caller that reports several causes can name the one remedy once."""

    def __init__(self, cause: str, remedy: str = "") -> None:
        super().__init__(f"{cause}; {remedy}" if remedy else cause)
        self.cause = cause
        self.remedy = remedy


class ManifestError(_CauseAndRemedy):
    """The bundled manifest is missing, unreadable, malformed, or names a file that is not
    valid (``cause`` says which; ``remedy`` is the reinstall command)."""

    exit_code = 7


class LibraryLoadError(_CauseAndRemedy):
    """A library could not be loaded, or it did not provide a valid exchange API table."""

    exit_code = 8
