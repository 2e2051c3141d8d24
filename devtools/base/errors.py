"""The dev tools' own errors: one base, one subclass per failure category, stable exit codes.

These never reach a user of the package: only ``nox`` sessions, CI and the tests run
devtools. The shipped package's errors (``_torch_c_dlpack_ext_core.errors``) keep
exit codes 1-8, these take 9-14; ``python -m devtools`` (:mod:`devtools.base.cli`, the one
place that reports them) prints either kind as one line and exits with its
``exit_code`` (:data:`HANDLED` lists both bases), and anything else with
:data:`UNEXPECTED_EXIT_CODE`.
"""

from __future__ import annotations

from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError

__all__ = [
    "HANDLED",
    "UNEXPECTED_EXIT_CODE",
    "CellsNotBuiltError",
    "DevToolError",
    "EmulationUnavailableError",
    "MatrixError",
    "ProvisionError",
    "ReleaseError",
]


class DevToolError(Exception):
    """Base class of every error the dev tools raise themselves."""

    exit_code: int = 10


class ReleaseError(DevToolError):
    """Release inputs are not publishable (stale or foreign files in dist/, a version
    that does not match the tag) or the index refused or lost an upload."""

    # 9 since before the dev tools had their own errors; kept for the workflow's scripts.
    exit_code = 9


class MatrixError(DevToolError):
    """``matrix.toml`` is unreadable or invalid (unknown key, platform, backend, index),
    or so is the job matrix made from it (``nox -s matrix`` output)."""

    exit_code = 11


class ProvisionError(DevToolError):
    """A cached torch environment could not be created (no uv, an install that failed,
    an environment without the torch it was made for)."""

    exit_code = 12


class CellsNotBuiltError(DevToolError):
    """Cells a job must deliver were skipped or failed to build."""

    exit_code = 13


class EmulationUnavailableError(DevToolError):
    """This host cannot run another architecture's programs (``nox -s emulated``): not
    root, no binfmt_misc, no qemu-user or debootstrap that could be installed."""

    exit_code = 14


#: What ``python -m devtools`` translates into one line and the error's exit code.
HANDLED = (TorchCDLPackExtError, DevToolError)

#: An exception none of the tools foresaw (a bug): sysexits.h's EX_SOFTWARE, apart from
#: every failure code above, so a CI log tells a bug from a failure.
UNEXPECTED_EXIT_CODE = 70
