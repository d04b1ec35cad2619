"""Real local HTTP servers on 127.0.0.x for crawler tests: one ThreadingHTTPServer per host, routes
are functions of the request handler. Bounded: servers live only inside the ``hosts`` context."""
from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

Route = Callable[[BaseHTTPRequestHandler], None]


class Host:
    def __init__(self, ip: str, routes: dict[str, Route]):
        self.routes = routes
        self.hits: dict[str, int] = {}
        self.headers_seen: list[dict] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802
                path = self.path
                host.hits[path] = host.hits.get(path, 0) + 1
                host.headers_seen.append(dict(self.headers))
                route = host.routes.get(path) or host.routes.get("*")
                if route is None:
                    send(self, 404, b"not found", "text/plain")
                else:
                    route(self)

        self.server = ThreadingHTTPServer((ip, 0), Handler)
        self.server.daemon_threads = True
        self.netloc = f"{ip}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://{self.netloc}{path}"


def send(h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
         headers: dict | None = None) -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(body)


@contextlib.contextmanager
def hosts(*route_maps: dict[str, Route], first_ip: int = 2) -> Iterator[list[Host]]:
    """Start one server per route map on 127.0.0.<first_ip>, <first_ip+1>, … and stop them after."""
    started = [Host(f"127.0.0.{first_ip + i}", r) for i, r in enumerate(route_maps)]
    for h in started:
        h.thread.start()
    try:
        yield started
    finally:
        for h in started:
            h.server.shutdown()
            h.server.server_close()


def send_chunked(h: BaseHTTPRequestHandler, pieces, ctype: str = "text/plain", headers: dict | None = None,
                 interval: float = 0.0) -> None:
    """A chunked 200 response from the iterable ``pieces`` (endless if it is), ``interval`` seconds
    between chunks; stops quietly when the client hangs up."""
    import time

    try:
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Transfer-Encoding", "chunked")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        for piece in pieces:
            h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            h.wfile.flush()
            if interval:
                time.sleep(interval)
        h.wfile.write(b"0\r\n\r\n")
    except OSError:  # the client gave up (what the crawler should do)
        pass
    h.close_connection = True


def trickle_headers(h: BaseHTTPRequestHandler, interval: float, lines: int = 10_000) -> None:
    """A status line, then one header line every ``interval`` seconds (a slowloris in reverse)."""
    import time

    try:
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        h.wfile.flush()
        for i in range(lines):
            time.sleep(interval)
            h.wfile.write(f"X-Slow-{i}: {i}\r\n".encode())
            h.wfile.flush()
        h.wfile.write(b"Content-Length: 0\r\n\r\n")
    except OSError:
        pass
    h.close_connection = True


def gzip_bomb(decoded_bytes: int, prefix: bytes = b"", filler: bytes = b"#") -> bytes:
    """A gzip body that inflates to ``prefix`` + ``decoded_bytes`` of ``filler`` (about 1000:1)."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip container
    out = [z.compress(prefix)]
    block = filler * (1 << 20)
    for _ in range(decoded_bytes >> 20):
        out.append(z.compress(block))
    out.append(z.flush())
    return b"".join(out)
