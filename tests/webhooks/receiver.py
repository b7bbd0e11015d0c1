#!/usr/bin/env python3
"""A webhook receiver for tests/api/webhooks.rs: HTTPS (Python's http.server and ssl, a thread
per connection, HTTP/1.1 keep-alive), verifying every delivery with the Standard Webhooks
specification's own Python library (standardwebhooks, which tests/run installs into
target/python-deps; run with PYTHONPATH pointing there).

    receiver.py --cert PEM --key PEM --log FILE --plan FILE [--secrets whsec_a[,whsec_b]]
                [--port N]

It listens on 127.0.0.1 (port 0, or --port to come back on the port of an earlier run) and
prints its port alone on its first line of standard output. For each POST it appends one JSON
line to the log and flushes it before it answers, so that a test sees a delivery even when
the server is killed while it waits for the answer:

    {"path", "id", "timestamp", "signature", "content_type", "body" (the text), "verified"
     (some secret verifies the delivery), "verified_with" (for each signature of the header,
     in its order, the index of the secret that verifies it alone, or null), "status" (what
     it answered), "at" (time.time() when the request was read)}

What it answers comes from the plan file, read at each request; a missing file is all
defaults: {"status": 200, "retry_after": null (a Retry-After header as is),
"retry_after_date": null (seconds from now: a Retry-After HTTP-date), "location": null (a
Location header), "sleep": 0 (seconds to wait before answering, after the log line),
"secrets": null (replaces --secrets), "idle_timeout": 120 (seconds a new connection may sit
idle before it is closed, which says "Request timed out" on standard error)}.
"""

import argparse
import email.utils
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from standardwebhooks.webhooks import Webhook
except ImportError as error:
    sys.exit(
        f"receiver.py: the Standard Webhooks library is missing ({error}): run `bash tests/run`, "
        "which installs it into target/python-deps"
    )

HANDSHAKE_TIMEOUT_SECONDS = 10
# A keep-alive connection idle this long is closed (the server opens another when it needs one).
IDLE_TIMEOUT_SECONDS = 120


def read_plan(path):
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        return {}


def verify(secrets, body, headers):
    """Whether some secret verifies the delivery, and which secret verifies each signature."""
    verified = False
    for secret in secrets:
        try:
            Webhook(secret).verify(body, headers)
            verified = True
        except Exception:
            pass
    verified_with = []
    for signature in (headers.get("webhook-signature") or "").split(" "):
        alone = dict(headers, **{"webhook-signature": signature})
        found = None
        for index, secret in enumerate(secrets):
            try:
                Webhook(secret).verify(body, alone)
                found = index
                break
            except Exception:
                pass
        verified_with.append(found)
    return verified, verified_with


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_SECONDS

    def setup(self):
        # The TLS handshake runs here, in the connection's thread, never in the accept loop.
        self.request.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        self.request.do_handshake()
        self.timeout = read_plan(self.server.plan).get("idle_timeout") or IDLE_TIMEOUT_SECONDS
        super().setup()

    def do_POST(self):
        at = time.time()
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        plan = read_plan(self.server.plan)
        secrets = plan.get("secrets") or self.server.secrets
        headers = {name.lower(): value for name, value in self.headers.items()}
        text = body.decode("utf-8", errors="replace")
        verified, verified_with = verify(secrets, text, headers)
        status = int(plan.get("status") or 200)
        entry = {
            "path": self.path,
            "id": headers.get("webhook-id"),
            "timestamp": headers.get("webhook-timestamp"),
            "signature": headers.get("webhook-signature"),
            "content_type": headers.get("content-type"),
            "body": text,
            "verified": verified,
            "verified_with": verified_with,
            "status": status,
            "at": at,
        }
        with self.server.log_lock:
            self.server.log.write(json.dumps(entry) + "\n")
            self.server.log.flush()
        if plan.get("sleep"):
            time.sleep(float(plan["sleep"]))
        try:
            self.send_response(status)
            if plan.get("retry_after") is not None:
                self.send_header("Retry-After", str(plan["retry_after"]))
            if plan.get("retry_after_date") is not None:
                when = time.time() + float(plan["retry_after_date"])
                self.send_header("Retry-After", email.utils.formatdate(when, usegmt=True))
            if plan.get("location"):
                self.send_header("Location", plan["location"])
            self.send_header("Content-Length", "0")
            self.end_headers()
        except OSError:
            # The server went away while this waited (a test killed it): nothing to answer.
            self.close_connection = True

    def log_message(self, format, *args):
        pass

    def log_error(self, format, *args):
        # "Request timed out" when it closes an idle connection, which a test waits for.
        print(f"receiver.py: {format % args}", file=sys.stderr, flush=True)


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A connection cut by a killed server is expected here; say it on stderr only.
        print(f"receiver.py: connection from {client_address}: {sys.exc_info()[1]!r}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--secrets", default="")
    parser.add_argument("--log", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server = Receiver(("127.0.0.1", args.port), Handler)
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    server.secrets = [secret for secret in args.secrets.split(",") if secret]
    server.plan = args.plan
    server.log = open(args.log, "a", encoding="utf-8")
    server.log_lock = threading.Lock()
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        server.log.close()


if __name__ == "__main__":
    main()
