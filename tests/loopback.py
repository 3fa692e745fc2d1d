"""A loopback HTTP server for the unit tests: files served by path, redirects, a download that breaks
once, and what it was asked (each request's path and Authorization header)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Served:
    """What the server serves (`files`: path -> bytes, "*" for any other path; `redirect`: path ->
    where to, or None to serve), where (`url`, no trailing slash), and what it was asked (`seen`)."""

    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    redirect: Callable[[str], str | None] = lambda path: None
    broken_once: set[str] = field(default_factory=set)  # paths whose next answer stops a third of the way
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]


@contextlib.contextmanager
def serving(served: Served | None = None, host: str = "127.0.0.1") -> Iterator[Served]:
    """`served` (a new one if None) served on `host` at a free port until the block ends."""
    served = served or Served()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            served.seen.append((self.path, self.headers.get("Authorization")))
            location = served.redirect(self.path)
            if location:
                self.send_response(302)
                self.send_header("Location", location)
                self.end_headers()
                return
            body = served.files.get(self.path, served.files.get("*"))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.path in served.broken_once:
                served.broken_once.discard(self.path)
                self.wfile.write(body[: len(body) // 3])  # the connection drops mid-transfer
                self.close_connection = True
                return
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    served.url = f"http://{host}:{server.server_address[1]}"
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
