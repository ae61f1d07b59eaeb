#!/usr/bin/env python3
"""Receive a rollout's webhook notifications on 127.0.0.1 and keep each one.

Usage: webhook_receiver.py DIR [--lifetime-s 1800]. Binds an HTTP server
(http.server's ThreadingHTTPServer) to 127.0.0.1 on a free port and writes the
port to DIR/port (atomically, once bound). Each POST is appended to
DIR/received.jsonl as one JSON line, ``{"path", "headers" (a mapping), "body"
(the body as JSON, or its text when it is not JSON), "at" (epoch seconds)}``,
and answered as Slack's incoming webhooks answer a message they took: HTTP 200
and the body ``ok`` (jenkinsci/slack-plugin PR #620: "Slack returns a response
where the HTTP code is 200, and the payload is just the string ok"). A POST
whose path starts with ``/never`` is kept the same way and never answered: its
connection stays open until the receiver ends (a webhook that does not answer).
Ends when DIR/stop exists (looked for every 0.5 s), when DIR is gone (molecule
destroy removed the scenario's ephemeral directory) or after the lifetime.
Exit status 0 when it ended so, 2 on a bad command line.
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

POLL_S = 0.5


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Receive webhook notifications on 127.0.0.1.")
    parser.add_argument("dir", type=Path, help="where port and received.jsonl are written, and stop read")
    parser.add_argument("--lifetime-s", type=float, default=1800.0, help="end after this many seconds")
    args = parser.parse_args(argv)
    where: Path = args.dir
    where.mkdir(parents=True, exist_ok=True)
    received = where / "received.jsonl"
    lock = threading.Lock()
    ending = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            text = self.rfile.read(length).decode("utf-8", "replace")
            try:
                body = json.loads(text)
            except ValueError:
                body = text
            line = {"path": self.path, "headers": dict(self.headers), "body": body, "at": time.time()}
            with lock, received.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
            if self.path.startswith("/never"):
                ending.wait()
                self.close_connection = True
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    # ThreadingHTTPServer's handler threads are daemons: a /never request left waiting does not hold the end.
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = where / "port"
    partial = where / "port.partial"
    partial.write_text(f"{server.server_address[1]}\n", encoding="utf-8")
    os.replace(partial, port)
    serving = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    serving.start()
    began = time.monotonic()
    while time.monotonic() - began < args.lifetime_s and where.is_dir() and not (where / "stop").exists():
        time.sleep(POLL_S)
    ending.set()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
