"""Every error this package raises, one subclass per failure category with a stable exit
code (a :class:`BuildError` keeps a failed tool's last lines: ``summary``, ``details``,
``tail``, ``output``), and the helpers that shape their messages (:func:`brief`,
:func:`output_tail`). The commands remedies name are :mod:`.remedies`', where an
installation came from :mod:`.installsource`'s. :mod:`torch_c_dlpack_ext.errors`
re-exports the errors a user catches.

Each error carries a message that says what went wrong *and* how to fix it. The
command-line entry points translate them at the boundary (``raise ... from None``
with a stable exit code), so users see one clear line instead of a traceback
unless they ask for it.
"""

from __future__ import annotations

from .version import __version__

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
    "PackageInArchiveError",
    "TorchCDLPackExtError",
    "TorchCDLPackExtWarning",
    "TorchHalfImportedError",
    "TorchInstallError",
    "UntrustedPathError",
    "brief",
    "output_tail",
    "table_error",
]


#: How to repair a damaged installation, where the code that finds the damage does not
#: know how this copy was installed (the core's file checks): no command, since a version
#: pinned on an index is right only for an index install. The selector, which reads the
#: installation record, names the command instead (:func:`.remedies.reinstall_remedy`).
REINSTALL = f"reinstall torch-c-dlpack-ext {__version__} the way it was installed"

#: How much of a failed tool's output an error shows: its last lines, at most this many
#: lines and characters (the error's ``output`` keeps all of it).
TAIL_LINES = 20
TAIL_CHARS = 2000


def output_tail(text: str, *, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last ``lines`` lines of a tool's ``text`` (surrounding blank space dropped), cut
    to the last ``chars`` characters; a cut is marked with a first line ``...``."""
    kept = text.strip().splitlines()
    cut = len(kept) > lines
    tail = "\n".join(kept[-lines:])
    if len(tail) > chars:
        tail, cut = tail[-chars:].partition("\n")[2] or tail[-chars:], True
    return f"...\n{tail}" if cut and tail else tail


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

    When a tool run failed, ``command`` is its argv and ``output`` its captured
    diagnostics, whole; both are empty otherwise. What to show a user:

    - ``summary``: the first line of the message (what failed);
    - ``details``: the rest of the message: for a failed tool, its last lines
      (``tail``, at most :data:`TAIL_LINES` lines / :data:`TAIL_CHARS` characters);
    - ``str(error)``: both, ``summary`` then ``details`` on the following lines.

    A display with room for one line only shows ``summary``; wherever it sends the user
    for more (a status, a report, ``--json``) belongs ``details``.
    """

    exit_code = 5

    def __init__(self, message: str, *, command: list[str] | None = None, output: str = "") -> None:
        super().__init__(message)
        self.command = command or []
        self.output = output
        self.tail = output_tail(output) if output.strip() else ""

    @property
    def summary(self) -> str:
        """The first line of the message: what failed."""
        return str(self).strip().partition("\n")[0]

    @property
    def details(self) -> str:
        """The message after its first line (a failed tool's last lines), or ``""``."""
        return str(self).strip().partition("\n")[2]

    @classmethod
    def from_command(
        cls, what: str, failed: CommandError, *, tail: int = TAIL_CHARS, fix: str = ""
    ) -> BuildError:
        """``what`` failed because ``failed``, a command it ran, exited non-zero.

        The first line says ``what``, the tool and its exit status (or that it printed
        nothing), then ``fix`` if given; the following lines are the tool's last lines
        (:func:`output_tail`: :data:`TAIL_LINES` lines, at most ``tail`` characters).
        ``command`` and ``output`` keep everything.
        """
        output = failed.stderr.strip() or failed.stdout.strip()
        tool = failed.cmd[0].replace("\\", "/").rsplit("/", 1)[-1] if failed.cmd else "the tool"
        summary = f"{what}: {tool} exited with status {failed.returncode}"
        summary += "" if output else " and printed nothing"
        summary += f"; {fix}" if fix else ""
        clipped = output_tail(output, chars=tail)
        error = cls(
            f"{summary}\n{clipped}" if clipped else summary, command=failed.cmd, output=output
        )
        error.tail = clipped
        return error


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


class PackageInArchiveError(ManifestError):
    """The package was imported from inside a zip archive (``zipimport``): its manifest
    and libraries are not files on disk, and ``dlopen`` loads only those."""


class LibraryLoadError(_CauseAndRemedy):
    """A library could not be loaded, or it did not provide a valid exchange API table."""

    exit_code = 8


class TorchHalfImportedError(_CauseAndRemedy, ImportError):
    """torch is in this process only half-initialised (an earlier ``import torch`` failed
    and left its submodules behind, or torch is still being imported): it is not imported
    again, nor touched (``cause`` says which; ``remedy`` what to do)."""

    exit_code = 3


class UntrustedPathError(TorchCDLPackExtError):
    """A file about to be loaded (or a directory above it) could have been written by an
    account this process does not trust (:mod:`.trust`): ``path`` is the file,
    ``component`` the offending file or directory, ``owner`` its uid, ``mode`` its
    permission bits."""

    exit_code = 9

    def __init__(self, message: str, *, path: object, component: object, owner: int, mode: int):
        super().__init__(message)
        self.path = path
        self.component = component
        self.owner = owner
        self.mode = mode


def table_error(origin: str, values: tuple[int, ...] | None) -> LibraryLoadError:
    """Why the loader's table check refused a table, as the error it raises.

    ``origin`` names where the table came from (a library, an attribute); ``values`` are
    the table as read (DLPack major and minor version, ``prev_api``, then the members in
    layout order), or ``None`` for a NULL pointer.
    """
    from .dlpack_ctypes import EXCHANGE_API_MEMBERS, SUPPORTED_MAJOR

    if values is None:
        return LibraryLoadError(f"{origin}: TorchDLPackExchangeAPIPtr() returned NULL")
    major, minor, _prev_api, *members = values
    if major != SUPPORTED_MAJOR:
        return LibraryLoadError(
            f"{origin}: exchange table has DLPack version {major}.{minor}, "
            f"this loader reads major version {SUPPORTED_MAJOR}",
            "upgrade torch-c-dlpack-ext or rebuild the library",
        )
    missing = [name for name, member in zip(EXCHANGE_API_MEMBERS, members) if not member]
    return LibraryLoadError(
        f"{origin}: exchange table has NULL member(s) {', '.join(missing)}",
        "the library is incomplete: rebuild it",
    )
