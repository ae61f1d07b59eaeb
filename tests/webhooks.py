"""Webhook servers on 127.0.0.1 for the notification tests (tests/test_notify.py,
tests/test_notify_playbook.py): :class:`Webhooks` records each request and answers it (by default
as Slack answers a message it took: ``200``, body ``ok``, docs.slack.dev "Incoming webhooks");
:class:`Silent` accepts each connection and never answers.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple


class Request(NamedTuple):
    """One request a :class:`Webhooks` server received: its method, path, headers and body (bytes)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def slack_ok(handler: BaseHTTPRequestHandler, body: bytes) -> None:
    """Answer as Slack's incoming webhooks answer a message they took: ``200``, body ``ok``."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()
    handler.wfile.write(b"ok")


class Webhooks:
    """An HTTP server on 127.0.0.1, serving from a thread until :meth:`close` (or the end of a
    ``with`` block): each GET or POST is recorded in :attr:`received` (a :class:`Request`) and
    answered by ``answer(handler, body)`` (default :func:`slack_ok`). :attr:`url` is
    ``http://127.0.0.1:<port>``, :attr:`port` the port."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler, bytes], None] = slack_ok) -> None:
        received: list[Request] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(Request(self.command, self.path, dict(self.headers), body))
                answer(self, body)

            do_GET = do_POST = _any  # noqa: N815 - http.server's names

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> Webhooks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, path: str) -> list[dict]:
        """The JSON bodies of the POSTs to ``path``, in the order received."""
        return [json.loads(r.body) for r in self.received if r.method == "POST" and r.path == path]


class Silent:
    """A server on 127.0.0.1 that accepts each connection and never answers (in a ``with`` block)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def __enter__(self) -> Silent:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()
