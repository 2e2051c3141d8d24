"""The test shard's environment check, in every process: ``pytest --shard NAME`` puts the
shard in ``$TCDE_SHARD`` (``tests/shards.py``'s ``shard_environ``), and
:func:`refuse_outside_shard` (called by :mod:`devtools.envs.torchenv` before it makes or
uses an env or tree) refuses, before anything is downloaded, an environment the shard
does not list: in the test process and in the subprocesses it starts (``python -m
devtools build``, the rehearsals) alike.

The variable is JSON: ``{"shard": NAME, "envs": FOLDER, "allowed": [PATTERN, ...]}``.
Only environments directly in ``FOLDER`` (the dev cache's ``envs`` of the run that set
it) are checked: unit tests make stand-ins in folders of their own. A pattern is a
directory name where ``*`` matches anything.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError

__all__ = ["SHARD_VARIABLE", "allowed", "refuse_outside_shard", "shard_value"]

SHARD_VARIABLE = "TCDE_SHARD"


def allowed(patterns: Sequence[str], env_name: str) -> bool:
    """Whether directory name ``env_name`` matches one of ``patterns`` (``*``: anything)."""
    return any(
        re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), env_name)
        for pattern in patterns
    )


def shard_value(shard: str, envs: Path, patterns: Sequence[str]) -> str:
    """:data:`SHARD_VARIABLE`'s value for ``shard`` guarding the folder ``envs``."""
    return json.dumps({"shard": shard, "envs": str(envs), "allowed": list(patterns)})


def _read(value: str) -> tuple[str, Path, tuple[str, ...]]:
    try:
        data = json.loads(value)
        shard, envs, patterns = data["shard"], data["envs"], data["allowed"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(
            f"${SHARD_VARIABLE} is not a test shard ({exc!r} in {value[:200]!r}): it is set by "
            f"`pytest --shard NAME`; unset it"
        ) from None
    if not (
        isinstance(shard, str)
        and isinstance(envs, str)
        and isinstance(patterns, list)
        and all(isinstance(p, str) for p in patterns)
    ):
        raise ConfigError(
            f"${SHARD_VARIABLE} is not a test shard (shard, envs, allowed: a name, a folder, "
            f"a list of patterns) in {value[:200]!r}; unset it"
        )
    return shard, Path(envs), tuple(patterns)


def refuse_outside_shard(root: Path, environ: Mapping[str, str] = os.environ) -> None:
    """Raise :class:`ConfigError` when ``$TCDE_SHARD`` is set, ``root`` lies in its
    folder and no pattern of the shard allows ``root``'s name."""
    value = environ.get(SHARD_VARIABLE)
    if value is None:
        return
    shard, envs, patterns = _read(value)
    if root.parent != envs or allowed(patterns, root.name):
        return
    raise ConfigError(
        f"the torch env {root.name} is outside test shard {shard!r} (${SHARD_VARIABLE}; it "
        f"allows {', '.join(patterns) or 'none'}): list the test that needs it under the "
        "shard that has it, or add the env's pattern to its shard, in tests/shards.py"
    )
