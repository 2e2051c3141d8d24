"""The observer a caller passes to :func:`devtools.envs.torchenv.torch_env` and
:func:`~devtools.envs.torchenv.torch_tree` (a parameter, never a registry): told of the
env or tree before it is used or made and after it is ready (the test suite's shard check
and footprint report are observers), and :class:`Observers`, several told as one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Protocol

__all__ = ["EnvObserver", "Observers"]


class EnvObserver(Protocol):
    """Told of the env or tree of each call it is passed to."""

    def before(self, root: Path) -> None:
        """``root`` is about to be used, and made first if it is not complete; raising
        here stops the call before anything is downloaded."""

    def after(self, root: Path, created: bool) -> None:
        """``root`` is complete; ``created``: this call made it (its marker holds the
        creation record)."""


@dataclasses.dataclass(frozen=True)
class Observers:
    """Several observers as one, told in their order."""

    members: tuple[EnvObserver, ...]

    def before(self, root: Path) -> None:
        for observer in self.members:
            observer.before(root)

    def after(self, root: Path, created: bool) -> None:
        for observer in self.members:
            observer.after(root, created)
