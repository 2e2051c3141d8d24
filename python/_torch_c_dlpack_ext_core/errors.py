"""Every error this package raises, one subclass per failure category with a stable exit
code (a :class:`BuildError` keeps a failed tool's last lines: ``summary``, ``details``,
``tail``, ``output``), and the remedies their messages name: the commands for this version
(:func:`reinstall_remedy`, :func:`reinstall_command`, :func:`build_from_source_command`),
which depend on where the installation came from (:class:`InstallSource`, read by the
selector from its installation record, PEP 610's ``direct_url.json`` and ``INSTALLER``, only
when a message names a command: a pinned version only for an index install), and the build
requirements. :mod:`torch_c_dlpack_ext.errors` re-exports the errors
a user catches.

Each error carries a message that says what went wrong *and* how to fix it. The
command-line entry points translate them at the boundary (``raise ... from None``
with a stable exit code), so users see one clear line instead of a traceback
unless they ask for it.
"""

from __future__ import annotations

from typing import NamedTuple

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
    "InstallSource",
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
    "build_from_source_command",
    "build_requirements_command",
    "install_source_of",
    "output_tail",
    "pinned_requirement",
    "reinstall_command",
    "reinstall_remedy",
    "table_error",
]

#: How to repair a damaged installation, where the code that finds the damage does not
#: know how this copy was installed (the core's file checks): no command, since a version
#: pinned on an index is right only for an index install. The selector, which reads the
#: installation record, names the command instead (:func:`reinstall_remedy`).
REINSTALL = f"reinstall torch-c-dlpack-ext {__version__} the way it was installed"

#: What a source build needs besides torch, by the module each provides: pyproject.toml's
#: ``[build-system] requires`` (a unit test keeps the two equal). A build without isolation
#: (the only kind that sees the user's torch) installs none of them itself.
BUILD_REQUIREMENTS = {
    "packaging": "packaging>=24",
    "filelock": "filelock>=3.12",
    "tvm_ffi": "apache-tvm-ffi>=0.1.6",
    "pyproject_metadata": "pyproject-metadata>=0.9",
    "tomli": "tomli>=1.1; python_version < '3.11'",
}

#: How much of a failed tool's output an error shows: its last lines, at most this many
#: lines and characters (the error's ``output`` keeps all of it).
TAIL_LINES = 20
TAIL_CHARS = 2000


#: What a command names where this copy's origin is not recorded.
_ITS_ORIGIN = "<its wheel, sdist or checkout>"


class InstallSource(NamedTuple):
    """Where an installation came from, as its installation record says, so that a remedy
    reinstalls from there: a version pinned on an index is right only for a release the
    index has (PyPI has no 0.2.0 while it is a local wheel).

    ``kind``: ``"index"`` (an installer's record, ``INSTALLER`` in the dist-info, without
    PEP 610's ``direct_url.json``: a release from an index), ``"dir"`` (a local directory),
    ``"archive"`` (a wheel or sdist, a file or a URL), ``"vcs"`` (a VCS checkout), or
    ``"unrecorded"`` (no installation record: a source tree or an unpacked wheel on
    ``sys.path``, where nothing says what it came from). ``location``: what pip installs it
    from again (a path for a ``file://`` URL, else the URL; ``git+<url>@<commit>`` for a
    checkout); for ``"unrecorded"``, the directory holding the copy. ``installer``: the
    record's ``INSTALLER`` (``pip``, ``uv``), where there is one."""

    kind: str = "index"
    location: str = ""
    installer: str = ""

    @property
    def is_wheel(self) -> bool:
        """Installed from a wheel file: a build from source needs its sdist or a checkout."""
        return self.kind == "archive" and self.location.endswith(".whl")

    def requirement(self) -> str:
        """What ``pip install`` takes to install it again from there (shell-quoted); a
        placeholder naming what to give it where that is not recorded."""
        if self.kind == "unrecorded":
            return _ITS_ORIGIN
        if self.kind == "index" or not self.location:
            return pinned_requirement()
        import shlex

        return shlex.quote(self.location)

    def describe(self) -> str:
        """How this copy was installed, for a message: ``installed by pip from a package
        index``, ``installed from the directory /src/x``, or, without a record, where the
        copy is and that nothing says where it came from."""
        by = f" by {self.installer}" if self.installer else ""
        if self.kind == "unrecorded":
            return (
                f"no installation record for this copy at {self.location or 'an unknown place'}: "
                "a source tree or an unpacked wheel?"
            )
        if self.kind == "index":
            return f"installed{by} from a package index"
        if self.kind == "dir":
            return f"installed{by} from the directory {self.location}"
        if self.kind == "vcs":
            return f"installed{by} from the checkout {self.location}"
        return f"installed{by} from {self.location}"


def install_source_of(
    direct_url_json: str | None, installer: str | None = "", *, location: str = ""
) -> InstallSource:
    """The :class:`InstallSource` an installation record describes: PEP 610's
    ``direct_url.json`` text and the dist-info's ``INSTALLER`` text (``None``: the
    dist-info has no such file). A ``direct_url.json`` names where the copy came from;
    without one (or one that cannot be read), an installer's record means an index
    install, and no ``INSTALLER`` means no record at all (an unpacked wheel): then
    ``"unrecorded"``, with ``location``, the directory holding the copy."""
    import json

    # Its first line only, printable and short: it is quoted in messages.
    first = (installer or "").strip().partition("\n")[0]
    name = "".join(c for c in first if c.isprintable())[:40]
    try:
        record = json.loads(direct_url_json) if direct_url_json else None
    except (ValueError, RecursionError):
        record = None
    url = record.get("url") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(url, str) or not url:
        if installer is None:
            return InstallSource("unrecorded", location)
        return InstallSource(installer=name)
    vcs = record.get("vcs_info")
    if isinstance(vcs, dict):
        commit = vcs.get("commit_id")
        location = f"{vcs.get('vcs', 'git')}+{url}" + (f"@{commit}" if commit else "")
        return InstallSource("vcs", location, name)
    if url.startswith("file:"):
        from urllib.parse import unquote, urlsplit
        from urllib.request import url2pathname

        url = url2pathname(unquote(urlsplit(url).path))
    kind = "dir" if isinstance(record.get("dir_info"), dict) else "archive"
    return InstallSource(kind, url, name)


def pinned_requirement() -> str:
    """``torch-c-dlpack-ext==<this version>``: what every remedy installs. Unpinned, pip
    picks whatever the index has (PyPI's 0.1.5 sdist before this version is published)."""
    return f"torch-c-dlpack-ext=={__version__}"


def reinstall_command(source: InstallSource | None = None) -> str:
    """The pip command that reinstalls this version's wheel (a damaged installation), from
    where ``source`` says it came from (default: the index, version pinned; a placeholder
    for the origin where nothing records it)."""
    requirement = (source or InstallSource()).requirement()
    return f"pip install --force-reinstall --no-deps {requirement}"


def reinstall_remedy(source: InstallSource | None = None) -> str:
    """How to repair this installation, as a message says it: how the copy was installed
    (:meth:`InstallSource.describe`) and the command that reinstalls it from there
    (:func:`reinstall_command`; default ``source``: the index)."""
    source = source or InstallSource()
    command = reinstall_command(source)
    if source.kind == "unrecorded":  # whatever put it on sys.path would shadow a new one
        command += ", then take this copy off sys.path"
    return f"reinstall torch-c-dlpack-ext ({source.describe()}): {command}"


def build_requirements_command(python: tuple[int, int] | None = None) -> str:
    """``pip install "packaging>=24" ...``: the build requirements a source build without
    isolation needs in the environment. ``python``: the target's ``(major, minor)``,
    default this one (``tomli`` is needed below 3.11)."""
    import sys

    major_minor = sys.version_info[:2] if python is None else python
    needed = [
        requirement.split(";")[0].strip()
        for module, requirement in BUILD_REQUIREMENTS.items()
        if module != "tomli" or major_minor < (3, 11)
    ]
    return "pip install " + " ".join(f'"{req}"' for req in needed)


def build_from_source_command(
    python: tuple[int, int] | None = None, source: InstallSource | None = None
) -> str:
    """The pip commands that build this version from its sdist against the torch already
    installed: the build requirements first (:func:`build_requirements_command`), then the
    build itself, without isolation (only that build sees the user's torch). ``source``:
    where this installation came from (default: the index, version pinned); a local
    directory, an sdist or a checkout is built from there, a wheel from its sources."""
    source = source or InstallSource()
    if source.kind == "index":
        target = f"--no-binary torch-c-dlpack-ext {pinned_requirement()}"
    elif source.is_wheel:
        # A wheel cannot be built from: its sources can (named, as a placeholder).
        target = (
            f"<a checkout or the sdist of torch-c-dlpack-ext {__version__}, the sources of "
            f"{source.location}>"
        )
    elif source.kind == "unrecorded":
        target = f"<a checkout or the sdist of torch-c-dlpack-ext {__version__}>"
    else:
        target = source.requirement()
    return (
        f"{build_requirements_command(python)} && pip install --force-reinstall --no-deps "
        f"--no-build-isolation {target}"
    )


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
