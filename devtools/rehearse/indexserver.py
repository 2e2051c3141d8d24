"""A local package index for rehearsals: pypiserver on a free port of 127.0.0.1, uploads
allowed without authentication, stopped on every exit path (:class:`IndexServer`), and
what it serves, read from its PEP 503 pages with their sha256 (:func:`served_hashes`).
``nox -s rehearse`` (:mod:`devtools.rehearse.rehearsal`) publishes to it and installs from it.

The server's ``Popen`` is the one subprocess of the developer tools that does not go
through ``run()``: it must outlive the call that starts it.

:class:`StaticIndexServer` serves a folder of static PEP 503 pages (the release's own
variant index, :mod:`devtools.release.variantindex`) from a thread of this process on
127.0.0.1: pypiserver lists no variants file, and a static host is what a release uses.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from _torch_c_dlpack_ext_core.naming import DIST_NAME
from devtools.base.errors import ReleaseError

__all__ = ["IndexServer", "StaticIndexServer", "log", "served_hashes"]

SERVER_START_TIMEOUT = 30.0
HTTP_TIMEOUT = 30.0


def log(message: str) -> None:
    """One progress line of the rehearsal (the server's and the steps around it), on stderr."""
    print(f"[rehearse {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class IndexServer:
    """pypiserver serving ``directory`` on 127.0.0.1, uploads allowed without auth.

    Use as a context manager: the server is stopped on every exit path.
    """

    def __init__(self, directory: Path, *, log: Path) -> None:
        self.directory = directory
        self.log = log
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def simple_url(self) -> str:
        return f"{self.url}/simple"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        # A port picked free can be taken before the server binds it: retry.
        for _ in range(3):
            self.port = _free_port()
            cmd = [sys.executable, "-m", "pypiserver", "run", "-p", str(self.port)]
            cmd += ["-i", "127.0.0.1", "-a", ".", "-P", ".", str(self.directory)]
            log(f"starting pypiserver: {' '.join(cmd)}")
            with self.log.open("ab") as output:
                self._process = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT)
            if self._wait_ready():
                log(f"index up at {self.simple_url}/ (pid {self._process.pid})")
                return
            self.stop()
        raise ReleaseError(f"pypiserver did not start; see {self.log}")

    def _wait_ready(self) -> bool:
        assert self._process is not None
        end = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < end:
            if self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.simple_url}/", timeout=2):
                    return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log(f"index stopped (pid {process.pid})")

    def __enter__(self) -> IndexServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request would drown the installs' own logs


class StaticIndexServer:
    """``directory`` served over HTTP on a free port of 127.0.0.1 by a thread of this
    process (``http.server``), as a static host serves the release's variant index.

    Use as a context manager: the server is shut down on every exit path.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise ReleaseError("the static index server is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StaticIndexServer:
        handler = functools.partial(_QuietHandler, directory=str(self.directory))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        log(f"static index up at {self.url}/ serving {self.directory}")
        return self

    def __exit__(self, *exc: object) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def served_hashes(simple_url: str, project: str = DIST_NAME) -> dict[str, str]:
    """``{file name: sha256}`` of a project's files, read from a PEP 503 page."""
    try:
        with urllib.request.urlopen(f"{simple_url}/{project}/", timeout=HTTP_TIMEOUT) as page:
            body = page.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise ReleaseError(f"{simple_url}/{project}/: HTTP {exc.code}") from None
    parser = _Links()
    parser.feed(body)
    hashes: dict[str, str] = {}
    for href in parser.hrefs:
        url, _, fragment = href.partition("#")
        if not fragment.startswith("sha256="):
            raise ReleaseError(f"index link without a sha256 fragment: {href}")
        hashes[url.rsplit("/", 1)[-1]] = fragment.removeprefix("sha256=")
    return hashes
