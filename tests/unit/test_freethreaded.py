"""``devtools.envs.freethreaded``'s pure parts: versions, apt configuration, Debian metadata, cache
paths and the cache's bookkeeping. Nothing here downloads or compiles (the real build is
``tests/integration/test_freethreaded_build.py``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from devtools.base import steps
from devtools.base.errors import ProvisionError
from devtools.envs import freethreaded
from devtools.envs.debsource import (
    DebianSource,
    apt_sources_list,
    dsc_version,
    orig_url,
    source_candidates,
    upstream_version,
)
from devtools.envs.freethreaded import (
    RECORD,
    SOURCES,
    FreeThreadedPython,
    free_threaded_python,
    parse_version,
    prefix_for,
)
from tests.helpers import ROOT, devtools_env

from _torch_c_dlpack_ext_core.errors import ConfigError

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("TCDE_DEV_CACHE", str(tmp_path / "dev-cache"))
    return tmp_path / "dev-cache"


# ---- versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "package"), [("3.14t", "python3.14"), ("3.13t", "python3.13")])
def test_supported_versions_name_their_debian_source(version: str, package: str) -> None:
    parsed, source = parse_version(version)
    assert parsed == version
    assert source.package == package
    assert source.suites[0] == "sid"


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("3.14", "names the GIL build; the free-threaded one is '3.14t'"),
        ("3.12t", "no free-threaded CPython 3.12t here"),
        ("3.15t", "no free-threaded CPython 3.15t here"),
        ("3.14T", "is not a version like '3.14t'"),
        ("3.14.7t", "is not a version like '3.14t'"),
        (" 3.14t", "is not a version like '3.14t'"),
        ("", "is not a version like '3.14t'"),
        ("cp314t", "is not a version like '3.14t'"),
    ],
)
def test_unsupported_versions_are_config_errors_naming_the_supported_ones(
    version: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as info:
        parse_version(version)
    if "names the GIL" not in says:
        assert "supported: 3.13t, 3.14t" in str(info.value)


@pytest.mark.parametrize("version", [None, 3.14, b"3.14t", ["3.14t"]])
def test_a_version_of_the_wrong_type_is_a_config_error(version: object) -> None:
    with pytest.raises(ConfigError, match=r"must be a string like '3\.14t'"):
        parse_version(version)


def test_bad_version_fails_before_touching_the_cache(cache: Path) -> None:
    with pytest.raises(ConfigError):
        free_threaded_python("3.14")
    assert not cache.exists()


@pytest.mark.parametrize("jobs", [0, -1, True])
def test_bad_jobs_are_config_errors(cache: Path, jobs: int) -> None:
    with pytest.raises(ConfigError, match="jobs must be a positive integer"):
        free_threaded_python("3.14t", jobs=jobs)
    assert not cache.exists()


@pytest.mark.parametrize(
    ("debian", "upstream"),
    [
        ("3.14.10-1", "3.14.10"),
        ("3.13.5-2+deb13u5", "3.13.5"),
        ("3.14.7-1", "3.14.7"),
        ("1:3.13.15-1", "3.13.15"),
        ("3.13.0~rc3-1", "3.13.0rc3"),
    ],
)
def test_upstream_version_drops_epoch_and_revision(debian: str, upstream: str) -> None:
    assert upstream_version(debian) == upstream


@pytest.mark.parametrize("debian", ["2.7.18-1", "3.14-1", "garbage", ""])
def test_upstream_version_refuses_what_is_not_a_cpython_release(debian: str) -> None:
    with pytest.raises(ProvisionError, match="is not a CPython release"):
        upstream_version(debian)


# ---- apt and Debian metadata --------------------------------------------------------------


def test_private_sources_list_has_one_signed_deb_src_line_per_suite() -> None:
    text = apt_sources_list(SOURCES["3.13t"], "http://deb.debian.org/debian/")
    assert text == (
        f"deb-src [signed-by={KEYRING}] http://deb.debian.org/debian sid main\n"
        f"deb-src [signed-by={KEYRING}] http://deb.debian.org/debian trixie main\n"
    )
    # No binary ("deb") lines: the private list fetches sources only.
    assert all(line.startswith("deb-src ") for line in text.splitlines())


@pytest.mark.parametrize("mirror", ["", "/", "http://a b/debian", "http://mirror/\ndeb x"])
def test_a_malformed_mirror_is_a_config_error(mirror: str) -> None:
    with pytest.raises(ConfigError, match="is not a URL"):
        apt_sources_list(SOURCES["3.14t"], mirror)


MADISON = """\
python3.14 |   3.14.9-1 | http://deb.debian.org/debian sid/main Sources
python3.14 |  3.14.10-1 | http://deb.debian.org/debian sid/main Sources
python3.14 |   3.14.8-1 | http://deb.debian.org/debian forky/main Sources
python3.14 |   3.14.9-1 | http://deb.debian.org/debian forky/main Sources
python3.14 | 3.14.11~rc1-1 | http://deb.debian.org/debian experimental/main Sources
python3.14 |   3.14.9-1 | http://deb.debian.org/debian sid/main amd64 Packages
python3.15 |   3.15.2-1 | http://deb.debian.org/debian sid/main Sources
W: something apt says
"""


def test_candidates_are_releases_newest_first_once_each() -> None:
    assert source_candidates(MADISON, "python3.14") == [
        ("3.14.10-1", "sid"),  # numerically newest (a string sort would put 3.14.9 first)
        ("3.14.9-1", "sid"),  # the first suite that names it
        ("3.14.8-1", "forky"),
    ]
    assert source_candidates(MADISON, "python3.13") == []
    assert source_candidates("", "python3.14") == []


DSC = """\
-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA512

Format: 3.0 (quilt)
Source: python3.14
Version: 3.14.7-1
Checksums-Sha256:
 3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81 24053924 x.orig.tar.xz

-----BEGIN PGP SIGNATURE-----
Version: GnuPG v2

iQJEBAEBCgAuFiEE1WVxuIqLuvFAv2PWvX6qYHePpvUFAmp64rwQHGRva29AZGVi
-----END PGP SIGNATURE-----
"""


def test_dsc_version_reads_the_field_not_the_signature_header() -> None:
    assert dsc_version(DSC) == "3.14.7-1"
    signature_only = DSC.replace("Version: 3.14.7-1\n", "")
    with pytest.raises(ProvisionError, match="no Version field"):
        dsc_version(signature_only)


def test_orig_url_follows_the_pool_layout() -> None:
    assert orig_url("python3.14", "3.14.7-1") == (
        "http://deb.debian.org/debian/pool/main/p/python3.14/python3.14_3.14.7.orig.tar.xz"
    )
    assert orig_url("libfoo", "3.1.2-1", "http://m/debian/") == (
        "http://m/debian/pool/main/libf/libfoo/libfoo_3.1.2.orig.tar.xz"
    )


def test_pinned_releases_are_well_formed() -> None:
    for source in SOURCES.values():
        for pin in source.pinned:
            assert re.fullmatch(r"[0-9a-f]{64}", pin.orig_sha256), pin
            assert upstream_version(pin.debian_version).startswith(source.package[6:] + ".")


# ---- cache paths and bookkeeping ------------------------------------------------------------


def test_prefix_honours_the_dev_cache_variable(cache: Path) -> None:
    assert prefix_for("3.14t") == cache / "python" / "3.14t"
    assert prefix_for("3.13t") == cache / "python" / "3.13t"


def test_prefix_defaults_to_the_users_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TCDE_DEV_CACHE", raising=False)
    expected = Path.home() / ".cache" / "torch-c-dlpack-ext-dev" / "python" / "3.14t"
    assert prefix_for("3.14t") == expected


def _fake_install(prefix: Path, version: str = "3.14t", python: str = "3.14.7") -> None:
    """What a finished build leaves: the interpreter and the record written last."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / f"python{version}").write_text("#!/bin/sh\n")
    include = prefix / "include" / f"python{version}"
    include.mkdir(parents=True)
    record = {"version": version, "python": python, "include": str(include), "source": "src"}
    (prefix / RECORD).write_text(json.dumps(record))


def test_a_complete_cache_entry_is_returned_without_building(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = cache / "python" / "3.14t"
    _fake_install(prefix)

    def no_build(*_: object) -> None:
        raise AssertionError("built although the cache is complete")

    monkeypatch.setattr(freethreaded, "_build", no_build)
    found = free_threaded_python("3.14t")
    assert found == FreeThreadedPython(
        version="3.14t",
        executable=prefix / "bin" / "python3.14t",
        include_dir=prefix / "include" / "python3.14t",
        prefix=prefix,
        python_version="3.14.7",
        source="src",
    )


@pytest.mark.parametrize("damage", ["no record", "no executable", "record not json"])
def test_an_incomplete_entry_and_stale_staging_are_removed_and_rebuilt(
    cache: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    root = cache / "python"
    prefix = root / "3.14t"
    _fake_install(prefix)
    if damage == "no record":
        (prefix / RECORD).unlink()
    elif damage == "no executable":
        (prefix / "bin" / "python3.14t").unlink()
    else:
        (prefix / RECORD).write_text("{")
    (prefix / "leftover").write_text("from the damaged entry")
    stale = root / ".build-3.14t-killed"
    stale.mkdir()
    other = root / ".build-3.13t-running"  # another version's build is not ours to touch
    other.mkdir()
    builds: list[tuple[str, Path, int]] = []

    def fake_build(version: str, source: DebianSource, where: Path, mirror: str, jobs: int) -> None:
        assert not stale.exists(), "the stale staging folder was not removed first"
        assert not where.exists(), "the incomplete entry was not removed first"
        builds.append((version, where, jobs))
        _fake_install(where)

    monkeypatch.setattr(freethreaded, "_preflight", lambda install_build_deps: None)
    monkeypatch.setattr(freethreaded, "_build", fake_build)
    found = free_threaded_python("3.14t", jobs=3)
    assert builds == [("3.14t", prefix, 3)]
    assert found.executable == prefix / "bin" / "python3.14t"
    assert not (prefix / "leftover").exists()
    assert other.is_dir()


def test_a_failed_build_leaves_no_entry(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_build(
        version: str, source: DebianSource, where: Path, mirror: str, jobs: int
    ) -> None:
        raise ProvisionError("make failed")

    monkeypatch.setattr(freethreaded, "_preflight", lambda install_build_deps: None)
    monkeypatch.setattr(freethreaded, "_build", failing_build)
    with pytest.raises(ProvisionError, match="make failed"):
        free_threaded_python("3.14t")
    assert sorted(p.name for p in (cache / "python").iterdir()) == ["3.14t.lock"]


def test_concurrent_callers_build_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[str] = []

    def slow_build(version: str, source: DebianSource, where: Path, mirror: str, jobs: int) -> None:
        builds.append(version)
        time.sleep(0.5)
        _fake_install(where)

    monkeypatch.setattr(freethreaded, "_preflight", lambda install_build_deps: None)
    monkeypatch.setattr(freethreaded, "_build", slow_build)
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda _: free_threaded_python("3.14t"), range(4)))
    assert builds == ["3.14t"]
    assert all(each == found[0] for each in found)


def test_a_lock_held_too_long_is_a_provision_error(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from filelock import FileLock

    monkeypatch.setattr(freethreaded, "_LOCK_TIMEOUT_S", 0.2)
    (cache / "python").mkdir(parents=True)
    # The caller runs in another thread, so it does not re-enter the holder's lock.
    with FileLock(str(cache / "python" / "3.14t.lock")), ThreadPoolExecutor(1) as pool:
        failure = pool.submit(free_threaded_python, "3.14t").exception()
    assert isinstance(failure, ProvisionError)
    assert re.search(r"another process has held .*3\.14t\.lock for 0 s", str(failure))


def test_an_unusable_cache_is_a_provision_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TCDE_DEV_CACHE", str(blocker / "cache"))
    with pytest.raises(ProvisionError, match="set TCDE_DEV_CACHE to a writable folder"):
        free_threaded_python("3.14t")


# ---- checks of the host and of the result ------------------------------------------------------


def test_missing_tools_name_the_apt_get_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    if real_which("apt-get") is None or not Path(KEYRING).is_file():
        pytest.skip("not a Debian host")
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "make" else real_which(name))
    monkeypatch.setattr(freethreaded, "_missing_packages", lambda packages: ["uuid-dev"])
    with pytest.raises(ProvisionError) as info:
        freethreaded._preflight(install_build_deps=False)
    message = str(info.value)
    assert "apt-get install -y --no-install-recommends make uuid-dev" in message
    assert "--install-build-deps" in message


def test_a_host_without_apt_is_told_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ProvisionError, match="needs apt-get and dpkg"):
        freethreaded._preflight(install_build_deps=False)


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg")
def test_missing_packages_asks_dpkg() -> None:
    missing = freethreaded._missing_packages(["dpkg", "tcde-no-such-package"])
    assert missing == ["tcde-no-such-package"]


@pytest.mark.parametrize(
    ("facts", "says"),
    [
        ({"Py_GIL_DISABLED": 0, "gil_enabled": True, "missing": []}, "is not free-threaded"),
        ({"Py_GIL_DISABLED": 1, "gil_enabled": True, "missing": []}, "is not free-threaded"),
        ({"Py_GIL_DISABLED": None, "gil_enabled": False, "missing": []}, "is not free-threaded"),
        (
            {"Py_GIL_DISABLED": 1, "gil_enabled": False, "missing": ["_ctypes (No module)"]},
            "lacks _ctypes (No module); apt-get install libffi-dev",
        ),
    ],
)
def test_the_result_must_be_free_threaded_and_complete(facts: dict[str, object], says: str) -> None:
    with pytest.raises(ProvisionError, match=re.escape(says)):
        freethreaded._verify("3.14t", facts)


def test_a_good_result_passes() -> None:
    freethreaded._verify("3.14t", {"Py_GIL_DISABLED": 1, "gil_enabled": False, "missing": []})


def test_a_failed_step_carries_the_tools_last_lines() -> None:
    script = "for i in $(seq 1 40); do echo out$i; done; echo 'fatal: no compiler' >&2; exit 3"
    with pytest.raises(ProvisionError) as info:
        steps.run_step("configure", ["sh", "-c", script])
    message = str(info.value)
    assert message.startswith("configure failed (exit code 3): sh -c")
    assert "out40" in message
    assert "fatal: no compiler" in message
    assert "out10\n" not in message  # only the last lines


def test_steps_report_progress_with_a_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    monkeypatch.setattr(freethreaded.PROGRESS, "heartbeat_s", 0.05)
    monkeypatch.setattr(freethreaded.PROGRESS, "current", ("3.14t", time.monotonic() - 7))
    monkeypatch.setattr(freethreaded.PROGRESS, "sink", None)
    freethreaded.set_progress(lines.append)
    with freethreaded.PROGRESS.step("make -j2"):
        time.sleep(0.3)
    assert lines[0].startswith("freethreaded [3.14t, 7 s]: make -j2"), lines
    assert len([line for line in lines if "still make -j2" in line]) >= 2, lines
    assert re.search(r"done in \d+\.\d s$", lines[-1]), lines


def test_the_command_line_reports_a_bad_version_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "devtools", "freethreaded", "3.14"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=devtools_env(),
        check=False,
    )
    assert proc.returncode == ConfigError.exit_code
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: ConfigError: '3.14' names the GIL build; the free-threaded one is '3.14t'"
        " (supported: 3.13t, 3.14t)"
    ]
