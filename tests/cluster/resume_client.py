"""An OpenAI-API client that outlives a router's death (docs/api.md, "Retries and resumption").

Every logical request carries an Idempotency-Key. On a connection error (refused, reset, or a
stream cut before its [DONE]) the client retries, a bounded number of times with a small
backoff, with the same body and key, and, for a stream it had started, Last-Event-ID: the id of
the last complete event it has. The router that gets the retry serves it from the generation a
worker still holds for the key, and the stream continues exactly after that event; a
non-streaming retry gets the whole answer.

Used by the cluster tests and scripts/chaos_up.py.
"""
import http.client
import json
import time
import uuid

# Errors that mean the connection (not the request) failed: worth a retry.
CONNECTION_ERRORS = (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead,
                     http.client.BadStatusLine, TimeoutError, OSError)


def new_key():
    return f"strata-test-{uuid.uuid4()}"


class Result:
    """What a logical request got, over all its attempts."""

    def __init__(self):
        self.status = None   # HTTP status of the attempt that answered
        self.body = None     # non-streaming: the parsed JSON answer (or error)
        self.events = []     # streaming: parsed data events, in order, over all attempts
        self.done = False    # streaming: [DONE] arrived
        self.retries = 0     # attempts after a connection error
        self.resumes = 0     # retries sent with Last-Event-ID (a started stream continued)
        self.last_id = None  # streaming: the id of the last complete event
        self.errors = []     # the connection errors retried, as text

    def text(self, choice=0):
        if self.body is not None and "choices" in self.body:
            return self.body["choices"][choice].get("text", "")
        return "".join(c.get("text", "") for e in self.events for c in e.get("choices", [])
                       if c.get("index", 0) == choice)


def _headers(key, last_id, extra):
    h = {"Content-Type": "application/json"}
    if key:
        h["Idempotency-Key"] = key
    if last_id is not None:
        h["Last-Event-ID"] = last_id
    h.update(extra or {})
    return h


def _read_stream(resp, result, on_event=None):
    """Reads SSE events into result until [DONE]; raises on a cut connection."""
    pending = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            raise http.client.IncompleteRead(pending)
        pending += chunk
        while b"\n\n" in pending:
            block, pending = pending.split(b"\n\n", 1)
            event_id, data = None, []
            for line in block.decode().split("\n"):
                if line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
            if event_id is not None:
                result.last_id = event_id
            payload = "\n".join(data)
            if payload == "[DONE]":
                result.done = True
                return
            if payload:
                result.events.append(json.loads(payload))
                if on_event is not None:
                    on_event(result)


def post(ports, path, body, key=None, attempts=6, backoff_s=0.25, timeout=120, headers=None,
         on_event=None):
    """POSTs body to the first of `ports` (trying the next on each retry) and returns a Result;
    raises the last connection error when every attempt failed. key None: a new one; "": none
    (a plain client). `on_event(result)` runs after each streamed event (a test can kill a
    router there)."""
    if isinstance(ports, int):
        ports = [ports]
    key = new_key() if key is None else key
    result = Result()
    stream = bool(body.get("stream"))
    for attempt in range(attempts):
        port = ports[attempt % len(ports)]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers=_headers(key, result.last_id if stream else None, headers))
            resp = conn.getresponse()
            result.status = resp.status
            if resp.status != 200 or not stream:
                raw = resp.read()
                try:
                    result.body = json.loads(raw)
                except ValueError:
                    result.body = {"raw": raw.decode(errors="replace")}
                return result
            _read_stream(resp, result, on_event)
            return result
        except CONNECTION_ERRORS as e:
            result.errors.append(f"{type(e).__name__}: {e}"[:200])
            if attempt + 1 == attempts:
                raise
            result.retries += 1
            if stream and result.last_id is not None:
                result.resumes += 1
            time.sleep(backoff_s * (attempt + 1))
        finally:
            conn.close()
    return result
