#!/usr/bin/env python3
"""A stand-in for a strata process in supervisor tests.

Serves GET /ready (503 until --ready-after seconds have passed, then 200) and GET /health (200)
on 127.0.0.1:--port. On SIGTERM it appends --name to --order-file, waits --term-delay seconds and
exits 0, or with --ignore-term keeps running. --exit-after S makes it print a fatal line to stderr
and exit with --exit-code after S seconds.
"""
import argparse
import http.server
import os
import signal
import sys
import threading
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--name", default="fake")
    p.add_argument("--ready-after", type=float, default=0.0)
    p.add_argument("--order-file", default="")
    p.add_argument("--term-delay", type=float, default=0.0)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--exit-after", type=float, default=-1.0)
    p.add_argument("--exit-code", type=int, default=1)
    args = p.parse_args()
    start = time.monotonic()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/ready":
                ready = time.monotonic() - start >= args.ready_after
                code = 200 if ready else 503
            elif self.path == "/health":
                code = 200
            else:
                code = 404
            body = b"ok\n" if code == 200 else b"not ready\n"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *a):
            pass

    def on_term(signum, frame):
        if args.order_file:
            with open(args.order_file, "a") as f:
                f.write(args.name + "\n")
        if args.ignore_term:
            return
        time.sleep(args.term_delay)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    if args.exit_after >= 0:
        def die():
            time.sleep(args.exit_after)
            print(f"fatal: {args.name} broke on purpose", file=sys.stderr, flush=True)
            os._exit(args.exit_code)
        threading.Thread(target=die, daemon=True).start()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"{args.name} listening on {args.port}", flush=True)
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
