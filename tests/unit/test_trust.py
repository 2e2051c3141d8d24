"""Trust in files before they are loaded (``_torch_c_dlpack_ext_core.trust``, issue 31
item 1): OpenSSH's StrictModes rule for a JIT cache, a ``LIBRARY`` override and a build's
output.

The attack test uses real second and third uids: forked children drop to them with
``os.setresuid`` (root only; the uids need no password entry). A planted library has a
constructor that writes a marker, so "the victim refused it" means its code never ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.helpers import torch_info

from _torch_c_dlpack_ext_core import buildsteps, driver, naming, trust
from _torch_c_dlpack_ext_core.errors import LibraryLoadError, UntrustedPathError
from _torch_c_dlpack_ext_core.files import read_verified
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend, library_filename
from _torch_c_dlpack_ext_core.trust import (
    TrustedOwners,
    check_trusted,
    open_trusted,
    parse_trusted_owner,
    read_trusted,
)
from _torch_c_dlpack_ext_core.version import __version__
from torch_c_dlpack_ext import _jit
from torch_c_dlpack_ext._decide import Settings
from torch_c_dlpack_ext._library import read_library
from torch_c_dlpack_ext._settings import read_settings

ROOT_ONLY = pytest.mark.needs_root  # changing owners and switching to other uids
POSIX_ONLY = pytest.mark.skipif(
    not hasattr(os, "geteuid"), reason="owners and modes are not checked on Windows"
)
ATTACKER, VICTIM = 2001, 2002
P = naming.ENV_PREFIX

INFO = torch_info()
LIB_NAME = library_filename(2, 8, Backend.CPU, True)

#: A "library" whose code, once loaded, leaves proof that it ran and as whom.
PLANTED_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fprintf(f, "%d\n", (int)getuid()); fclose(f); }
}
"""


def in_child(uid: int, body: Callable[[], Any]) -> Any:
    """Run ``body`` in a forked child as ``uid`` (real, effective and saved); return what
    it returned, or the ``repr`` of what it raised as ``{"raised": ...}``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                result: Any = {"returned": body()}
            except BaseException as exc:
                result = {"raised": type(exc).__name__, "message": str(exc)}
            os.write(write_end, json.dumps(result, default=str).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        data = handle.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    return json.loads(data)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A root-owned 0755 directory directly under /tmp (sticky, world-writable): pytest's
    own tmp_path is under a 0700 directory other uids cannot enter."""
    base = Path(tempfile.mkdtemp(prefix="tcde-trust-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def plant(output_dir: Path, library: bytes, name: str = LIB_NAME) -> None:
    """What an attacker writes: a library and a build record naming this torch build,
    with the library's own size and sha256 (which is why a record proves nothing)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / name).write_bytes(library)
    entry = ManifestEntry(
        file=name,
        torch="2.8",
        torch_build=INFO.version,
        backend=Backend.CPU,
        cxx11_abi=True,
        dlpack="1.3",
        toolchain="g++ 12.2.0",
        gpu_toolkit=None,
        platform=naming.host_platform_tag(),
        python=naming.running_python_target(),
        size=len(library),
        sha256=hashlib.sha256(library).hexdigest(),
    )
    record = {"key": "planted", "entry": entry.to_json(), "package": __version__}
    (output_dir / f"{name}.build.json").write_text(json.dumps(record), encoding="utf-8")


def compile_planted(dest: Path, marker: Path) -> bytes:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the planted library")
    source = dest / "planted.c"
    source.write_text(PLANTED_C, encoding="utf-8")
    out = dest / "planted.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", f'-DMARKER="{marker}"', str(source), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    return out.read_bytes()


@ROOT_ONLY
def test_a_library_another_user_planted_in_a_read_only_cache_is_refused(
    shared_tmp: Path,
) -> None:
    """The attack of issue 31: uid 2001 plants a library and a matching record in a cache
    uid 2002 uses but cannot write; uid 2002's JIT must refuse it, and its code never run."""
    from torch_c_dlpack_ext._library import open_library

    marker = shared_tmp / "ran-as"
    library = compile_planted(shared_tmp, marker)
    attacker_home = shared_tmp / "attacker"
    attacker_home.mkdir(mode=0o755)
    os.chown(attacker_home, ATTACKER, ATTACKER)
    cache = attacker_home / "cache"
    output_dir = cache / _jit.cache_key(INFO, Backend.CPU, _jit.python_tag())
    marker_dir = shared_tmp / "markers"
    marker_dir.mkdir(mode=0o777)

    def attacker() -> None:
        os.umask(0o022)
        plant(output_dir, library)

    def victim() -> str:
        path, data = _jit.build(None, INFO, Backend.CPU, Settings(cache_dir=cache))
        open_library(path, data)  # what the JIT import does next
        return str(path)

    assert "raised" not in in_child(ATTACKER, attacker)
    outcome = in_child(VICTIM, victim)
    assert not marker.exists(), f"the planted library ran as uid {marker.read_text().strip()}"
    assert outcome.get("raised") == "UntrustedPathError", outcome
    message = outcome["message"]
    assert f"its directory {attacker_home} is owned by uid {ATTACKER}" in message
    assert "with mode 0755" in message
    assert "TORCH_C_DLPACK_EXT_TRUSTED_OWNER=<that account>" in message

    # The same cache, trusted on purpose: the victim names the account that built it.
    def trusting_victim() -> str:
        settings = Settings(cache_dir=cache, trusted_owner=ATTACKER)
        return str(_jit.build(None, INFO, Backend.CPU, settings)[0])

    assert in_child(VICTIM, trusting_victim) == {"returned": str(output_dir / LIB_NAME)}


@ROOT_ONLY
def test_a_root_owned_shared_cache_is_used_read_only_by_another_user(shared_tmp: Path) -> None:
    cache = shared_tmp / "cache"
    output_dir = cache / _jit.cache_key(INFO, Backend.CPU, _jit.python_tag())
    plant(output_dir, b"\x7fELF built by root")
    for path in (cache, *output_dir.parents[: len(output_dir.parts) - len(cache.parts)]):
        path.chmod(0o755)

    def victim() -> str:
        return str(_jit.build(None, INFO, Backend.CPU, Settings(cache_dir=cache))[0])

    assert in_child(VICTIM, victim) == {"returned": str(output_dir / LIB_NAME)}


@ROOT_ONLY
def test_a_record_that_does_not_match_every_key_field_is_not_reused(shared_tmp: Path) -> None:
    """Trusted files, but a record for another package version or Python ABI: no reuse."""
    cache = shared_tmp / "cache"
    output_dir = cache / _jit.cache_key(INFO, Backend.CPU, _jit.python_tag())
    plant(output_dir, b"\x7fELF")
    record_path = output_dir / f"{LIB_NAME}.build.json"
    good = json.loads(record_path.read_text(encoding="utf-8"))
    owners = TrustedOwners()
    assert _jit._reuse_read_only(output_dir, INFO, Backend.CPU, owners) is not None
    for change in ({"package": "0.0.1"}, {"entry": {**good["entry"], "python": "3.99t"}}):
        record_path.write_text(json.dumps({**good, **change}), encoding="utf-8")
        assert _jit._reuse_read_only(output_dir, INFO, Backend.CPU, owners) is None, change
    record_path.write_text(json.dumps({**good, "entry": {**good["entry"], "cxx11_abi": False}}))
    assert _jit._reuse_read_only(output_dir, INFO, Backend.CPU, owners) is None


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``<tmp>/a/b/lib.so``: every part ours and 0755 / 0644 (trusted)."""
    lib = tmp_path / "a" / "b" / "lib.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"library")
    for path in (tmp_path / "a", lib.parent):
        path.chmod(0o755)
    lib.chmod(0o644)
    return lib


@POSIX_ONLY
def test_a_trusted_tree_is_read(tree: Path) -> None:
    assert read_trusted(tree, 100) == b"library"
    check_trusted(tree.parent, directory=True)


@POSIX_ONLY
@pytest.mark.parametrize(
    ("part", "mode", "why"),
    [
        ("a", 0o775, "writable by group"),
        ("a", 0o757, "writable by others"),
        ("b", 0o777, "writable by others"),
        ("lib.so", 0o646, "writable by others"),
        ("lib.so", 0o664, "writable by group"),
    ],
)
def test_a_part_writable_by_others_is_refused(
    tree: Path, part: str, mode: int, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = {"a": tree.parent.parent, "b": tree.parent, "lib.so": tree}[part]
    target.chmod(mode)
    # A group other than the owner's private one (which group-writable may name: below).
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chown(target, -1, ATTACKER)  # a gid no account of this machine has
    else:
        monkeypatch.setattr(trust, "_private_group", lambda gid, owner: False)
    with pytest.raises(UntrustedPathError) as caught:
        read_trusted(tree, 100)
    error = caught.value
    owner = os.geteuid()
    assert (error.path, error.component, error.owner, error.mode) == (tree, target, owner, mode)
    message = str(error)
    assert f"refusing to load {tree}" in message
    assert f"mode {mode:04o}, {why}" in message
    assert f"chmod go-w {target}" in message


def _accounts(
    monkeypatch: pytest.MonkeyPatch, users: dict[str, tuple[int, int]], groups: dict[int, list[str]]
) -> None:
    """A password and group database of ``users`` (name -> (uid, primary gid)) and
    ``groups`` (gid -> supplementary members), in place of the machine's."""
    import grp
    import pwd

    entries = [SimpleNamespace(pw_name=n, pw_uid=u, pw_gid=g) for n, (u, g) in users.items()]
    by_uid = {e.pw_uid: e for e in entries}

    def getgrgid(gid: int) -> Any:
        if gid not in groups:
            raise KeyError(gid)
        return SimpleNamespace(gr_gid=gid, gr_mem=groups[gid])

    monkeypatch.setattr(pwd, "getpwall", lambda: entries)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: by_uid[uid])
    monkeypatch.setattr(grp, "getgrgid", getgrgid)


@pytest.mark.parametrize(
    ("users", "groups", "private"),
    [
        # Debian's user private group: alice's primary group, no other member.
        ({"alice": (1000, 1000)}, {1000: []}, True),
        ({"alice": (1000, 1000)}, {1000: ["alice"]}, True),
        # bob has it as his primary group, or is a supplementary member.
        ({"alice": (1000, 1000), "bob": (1001, 1000)}, {1000: []}, False),
        ({"alice": (1000, 1000), "bob": (1001, 1001)}, {1000: ["bob"]}, False),
        ({"alice": (1000, 1000)}, {1000: ["alice", "bob"]}, False),
        # A group with no member at all (a setgid program's), or none in the database.
        ({"alice": (1000, 100)}, {1000: []}, False),
        ({"alice": (1000, 1000)}, {}, False),
    ],
)
def test_group_writable_is_trusted_only_for_the_owners_private_group(
    monkeypatch: pytest.MonkeyPatch,
    users: dict[str, tuple[int, int]],
    groups: dict[int, list[str]],
    private: bool,
) -> None:
    _accounts(monkeypatch, users, groups)
    assert trust._private_group(1000, 1000) is private


@POSIX_ONLY
def test_a_cache_built_under_umask_002_in_a_private_group_is_read(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user of a distribution with user private groups (umask 002) builds: its
    directories 0775 and files 0664, the group the user's own. Accepted; a group with a
    second member is refused."""
    me = os.geteuid()
    for path in (tree.parent.parent, tree.parent):
        path.chmod(0o775)
    tree.chmod(0o664)
    gid = os.stat(tree).st_gid
    _accounts(monkeypatch, {"me": (me, gid)}, {gid: []})
    assert read_trusted(tree, 100) == b"library"
    _accounts(monkeypatch, {"me": (me, gid), "other": (me + 1, gid)}, {gid: []})
    with pytest.raises(UntrustedPathError, match="writable by group"):
        read_trusted(tree, 100)


@ROOT_ONLY
@pytest.mark.parametrize("part", ["a", "b", "lib.so"])
def test_a_part_owned_by_another_user_is_refused_unless_trusted(tree: Path, part: str) -> None:
    target = {"a": tree.parent.parent, "b": tree.parent, "lib.so": tree}[part]
    os.chown(target, ATTACKER, ATTACKER)
    with pytest.raises(UntrustedPathError, match=f"owned by uid {ATTACKER} with mode") as caught:
        read_trusted(tree, 100)
    assert f"Fix it (chown root {target}, or rebuild it yourself)" in str(caught.value)
    # TORCH_C_DLPACK_EXT_TRUSTED_OWNER names the account: its files are trusted.
    assert read_trusted(tree, 100, TrustedOwners(ATTACKER)) == b"library"
    with pytest.raises(UntrustedPathError):
        read_trusted(tree, 100, TrustedOwners(ATTACKER + 1))


@ROOT_ONLY
def test_a_symlink_is_judged_by_what_it_leads_to(tree: Path, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.so"
    foreign.write_bytes(b"theirs")
    foreign.chmod(0o644)
    os.chown(foreign, ATTACKER, ATTACKER)
    link = tree.parent / "link.so"
    link.symlink_to(foreign)
    with pytest.raises(UntrustedPathError) as caught:
        read_trusted(link, 100)
    assert caught.value.component == foreign
    ours = tree.parent / "ours.so"
    ours.symlink_to(tree)
    assert read_trusted(ours, 100) == b"library"


@ROOT_ONLY
def test_a_sticky_parent_is_shared_but_the_entry_in_it_must_be_ours(tree: Path) -> None:
    parent = tree.parent.parent  # "a"
    parent.chmod(0o1777)  # like /tmp
    assert read_trusted(tree, 100) == b"library"
    os.chown(tree.parent, ATTACKER, ATTACKER)  # "b", inside the sticky "a", is theirs
    with pytest.raises(UntrustedPathError, match=f"its directory {tree.parent} is owned"):
        read_trusted(tree, 100)
    # A sticky directory is never acceptable as the one the check ends at (the cache).
    os.chown(tree.parent, 0, 0)
    tree.parent.chmod(0o1777)
    with pytest.raises(UntrustedPathError, match="writable by others"):
        check_trusted(tree.parent, directory=True)


@ROOT_ONLY
def test_the_checked_descriptor_is_the_one_read(tree: Path) -> None:
    """open_trusted returns the descriptor it checked: replacing the path afterwards (with
    another user's file) changes nothing about what is read."""
    fd, info = open_trusted(tree)
    try:
        tree.unlink()
        tree.write_bytes(b"swapped")
        os.chown(tree, ATTACKER, ATTACKER)
        assert os.read(fd, 100) == b"library"
        assert stat.S_ISREG(info.st_mode)
    finally:
        os.close(fd)


@ROOT_ONLY
def test_the_driver_does_not_trust_a_cached_build_another_user_wrote(tmp_path: Path) -> None:
    """buildsteps.cached_entry (the writable JIT path): same rule as the read-only one."""
    plant(tmp_path, b"\x7fELF planted")
    (tmp_path / f"{LIB_NAME}.build.json").write_text(
        json.dumps({**json.loads((tmp_path / f"{LIB_NAME}.build.json").read_text()), "key": "k"})
    )
    os.chown(tmp_path / LIB_NAME, ATTACKER, ATTACKER)
    plan = SimpleNamespace(
        sidecar=tmp_path / f"{LIB_NAME}.build.json", output_dir=tmp_path, filename=LIB_NAME
    )
    with pytest.raises(UntrustedPathError, match=f"refusing to load {tmp_path / LIB_NAME}"):
        buildsteps.cached_entry(plan, "k", TrustedOwners())  # type: ignore[arg-type]
    os.chown(tmp_path / LIB_NAME, 0, 0)
    entry = buildsteps.cached_entry(plan, "k", TrustedOwners())  # type: ignore[arg-type]
    assert entry is not None
    assert read_verified(entry, tmp_path, owners=TrustedOwners())[1] == b"\x7fELF planted"


@ROOT_ONLY
def test_a_library_override_owned_by_another_user_is_refused(tree: Path) -> None:
    os.chown(tree, ATTACKER, ATTACKER)
    with pytest.raises(LibraryLoadError, match=f"owned by uid {ATTACKER} with mode 0644"):
        read_library(tree, TrustedOwners())
    assert read_library(tree, TrustedOwners(ATTACKER)) == b"library"


def test_the_selector_checks_a_library_override_for_trust() -> None:
    """The LIBRARY override is read through the trust check (not a path-only read)."""
    import inspect

    from torch_c_dlpack_ext import _apply

    source = inspect.getsource(_apply._Action.load_override)
    assert "read_library(path, self.owners())" in source


def test_trusted_owner_setting_is_read_strictly() -> None:
    assert read_settings({P + "TRUSTED_OWNER": "2001"}).trusted_owner == 2001
    nobody = read_settings({P + "TRUSTED_OWNER": "nobody"})
    if sys.platform.startswith("linux"):
        import pwd

        assert nobody.trusted_owner == pwd.getpwnam("nobody").pw_uid
    for bad in ("no-such-user-xyz", "-1", "1.5", "99999999999", "2001 2002"):
        settings = read_settings({P + "TRUSTED_OWNER": bad})
        assert settings.trusted_owner is None, bad
        (problem,) = settings.problems
        assert problem.variable == P + "TRUSTED_OWNER"
        assert repr(bad) in problem.message
    assert parse_trusted_owner(" 0 ") == 0


@ROOT_ONLY
def test_an_import_refuses_a_library_override_another_user_owns(tree: Path) -> None:
    """The whole import: LIBRARY names a file of uid 2001; nothing is loaded and the
    warning names the file, its owner and mode, and the fix."""
    pytest.importorskip("torch")
    from tests.helpers import clean_env, make_package, run_python

    os.chown(tree, ATTACKER, ATTACKER)
    package = make_package(tree.parent.parent / "pkg", manifest=False)
    code = (
        "import warnings\nwith warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n"
        "    import torch\nimport torch_c_dlpack_ext as p\ns = p.status()\n"
        "print(s.kind.value); print(s.reason)"
    )
    env = clean_env(**{P + "LIBRARY": str(tree), P + "FORCE": "1"})
    proc = run_python(code, pythonpath=[package], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kind, reason = proc.stdout.strip().splitlines()[-2:]
    assert kind == "unavailable"
    assert f"refusing to load {tree}: it is owned by uid {ATTACKER} with mode 0644" in reason
    assert "TORCH_C_DLPACK_EXT_TRUSTED_OWNER" in proc.stderr


def test_a_file_loaded_because_of_trusted_owner_is_announced(tmp_path: Path) -> None:
    from torch_c_dlpack_ext._apply import _Action

    lib = tmp_path / "lib.so"
    lib.write_bytes(b"x")
    uid = lib.stat().st_uid
    action = SimpleNamespace(settings=Settings(trusted_owner=uid), messages=[])
    _Action.note_trusted_owner(action, lib)  # type: ignore[arg-type]
    # Your own files (and root's) are trusted anyway: nothing to announce.
    assert action.messages == []
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.chown(lib, ATTACKER, ATTACKER)
        action = SimpleNamespace(settings=Settings(trusted_owner=ATTACKER), messages=[])
        _Action.note_trusted_owner(action, lib)  # type: ignore[arg-type]
        assert action.messages == [
            f"loaded {lib}, owned by uid {ATTACKER}, which TORCH_C_DLPACK_EXT_TRUSTED_OWNER trusts"
        ]


@ROOT_ONLY
def test_build_tools_build_in_a_tree_another_uid_owns_but_the_jit_does_not(
    fake_torch: Any, dlpack_include: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build backend and devtools package what they build from a source tree whose
    owner they already trust (a checkout of uid 1000 mounted into a root container): no
    check. The JIT, which loads what it builds, passes ``owners`` and is refused."""
    from tests.unit.test_build_notes import _fake_compiler, _sources

    for var in ("CUDA_HOME", "CUDA_PATH", "CXX"):
        monkeypatch.delenv(var, raising=False)
    checkout = tmp_path / "checkout"
    checkout.mkdir(mode=0o755)
    os.chown(checkout, ATTACKER, ATTACKER)
    request = driver.BuildRequest(
        torch=fake_torch("2.8.0+cpu", abi=True, cuda=None),
        backend=Backend.CPU,
        output_dir=checkout / "build",
        dlpack_include=dlpack_include,
        source_dir=_sources(tmp_path / "csrc"),
        cxx=str(_fake_compiler(tmp_path / "g++")),
    )
    entry = driver.compile_library(request, driver.BuildPolicy(audit=False, echo=False))
    assert (checkout / "build" / entry.file).is_file()
    with pytest.raises(UntrustedPathError, match=f"its directory {checkout} is owned by uid"):
        driver.compile_library(
            request, driver.BuildPolicy(audit=False, echo=False, owners=TrustedOwners())
        )
