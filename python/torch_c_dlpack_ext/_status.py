"""What ``import torch_c_dlpack_ext`` did, as a record a user can read: :class:`Status`,
built on demand from the fields the import keeps (:class:`StatusFields`, a ``TypedDict``).

Built on demand (by :func:`torch_c_dlpack_ext.status`, the diagnostics, an explicit
build), never by the import itself: the import keeps the fields and this module turns
them into a frozen dataclass the first time someone asks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TypedDict

from ._model import Decision, DecisionKind, Settings, TorchInfo

__all__ = ["Status", "StatusFields"]


class StatusFields(TypedDict, total=False):
    """What the import keeps of its outcome, to make its :class:`Status` from later
    (``_apply.status_of``). Only the common path's ``kind``, ``library`` and
    ``common_path`` are set by the import's hot path, which imports this module only for
    type checking."""

    #: A :class:`DecisionKind` (or its value, from the common path).
    kind: str
    #: The library loaded: a path as text from the common path (no ``pathlib`` there).
    library: Path | str | None
    torch: TorchInfo | None
    reason: str
    remedy: str
    warnings: tuple[str, ...]
    decision: Decision | None
    settings: Settings | None
    #: Published on the common path (``_loader``): the record is made by running the
    #: selector's decision on the same inputs.
    common_path: bool


@dataclasses.dataclass(frozen=True)
class Status:
    """What ``import torch_c_dlpack_ext`` did, and why (see :func:`torch_c_dlpack_ext.status`)."""

    #: The outcome: ``LOAD``/``JIT`` only if a library was published.
    kind: DecisionKind
    #: The library whose table is published (``None`` unless ``kind`` is LOAD, JIT or
    #: PORTABLE).
    library: Path | None = None
    #: The running torch, ``None`` if torch could not be imported.
    torch: TorchInfo | None = None
    reason: str = ""
    remedy: str = ""
    #: Every warning emitted, in order.
    warnings: tuple[str, ...] = ()
    #: The selector's decision (``None`` if it could not run).
    decision: Decision | None = None
    settings: Settings | None = None

    @property
    def published(self) -> bool:
        """True if this package set the attributes on ``torch.Tensor``."""
        return self.kind in (
            DecisionKind.LOAD,
            DecisionKind.JIT,
            DecisionKind.PORTABLE,
            DecisionKind.PUBLISH_LEGACY,
        )

    @property
    def portable(self) -> bool:
        """The published table is the portable one (torch's Python-level DLPack
        functions, called from C): slower per call than a native library."""
        return self.kind is DecisionKind.PORTABLE

    @property
    def native_speed(self) -> str:
        """Where the portable table serves, how to get the native library's speed instead,
        or why it is out of reach for this torch (``_wording.native_speed``: the JIT only
        where it could build for this torch, whose headers are looked for now); ``""``
        elsewhere."""
        if not self.portable or self.torch is None:
            return ""
        import sys

        from ._jit import headers_problem
        from ._wording import native_speed

        headers = headers_problem(sys.modules.get("torch"))
        return native_speed(self.torch, self.settings, headers=headers)

    def __str__(self) -> str:
        """A few lines for people (``print(status())``): the outcome, the library, the
        reason, the fix, and each warning that does not just restate the reason. The
        reason, the fix and the warnings are whole, wrapped at word boundaries (a fix is
        often a command: it is never cut); only a long library path is clipped.
        ``repr()`` and the fields keep everything."""

        def clip(text: str, width: int = 320) -> str:
            text = " ".join(text.split())
            return text if len(text) <= width else text[: width - 3].rstrip() + "..."

        def whole(text: str) -> str:
            return _wrapped(text, indent=" " * 11)

        if self.torch is None:
            torch = "torch not importable"
        else:
            torch = f"torch {self.torch.version}, {self.torch.backend.value}"
        lines = [f"torch-c-dlpack-ext: {self.kind.value} ({torch})"]
        if self.library is not None:
            lines.append(f"  library: {clip(str(self.library))}")
        if self.portable:
            from ._wording import cost_line

            lines.append(f"  cost:    {whole(cost_line(self.native_speed))}")
        if self.reason:
            lines.append(f"  reason:  {whole(self.reason)}")
        if self.remedy:
            lines.append(f"  fix:     {whole(self.remedy)}")
        reason = self.reason.casefold()
        lines.extend(
            f"  warning: {whole(w)}"
            for w in self.warnings
            if not (reason and reason in w.casefold())
        )
        return "\n".join(lines)


def _wrapped(text: str, indent: str, width: int = 100) -> str:
    """``text`` wrapped at word boundaries to lines of at most ``width`` characters, every
    line after the first starting with ``indent``. A word longer than the line (a path)
    gets a line of its own, whole up to 200 characters; a longer one (a runaway value,
    never a command's word) is shortened to its start and end."""
    import textwrap

    words = (
        word if len(word) <= 200 else f"{word[:60]}...{word[-60:]} ({len(word)} characters)"
        for word in text.split()
    )
    lines = textwrap.wrap(
        " ".join(words),
        width=width - len(indent),
        break_long_words=False,
        break_on_hyphens=False,
    )
    return f"\n{indent}".join(lines)
