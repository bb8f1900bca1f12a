"""JSON over HTTP to an environment server, with timeouts and retries (standard library only).

Every request has a timeout. A refused or dropped connection, a timeout and an HTTP 5xx are
retried with exponential backoff (``backoff``, twice that, ...) up to ``retries`` times; then,
and for any other failure (a 4xx, a body that is not JSON, an ``error`` field in a 200 reply, as
AgentGym's ALFWorld server reports errors), `ServerError` names the method, the URL and what
went wrong. Nothing waits longer than ``(retries + 1) * timeout`` plus the backoff.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class ServerError(RuntimeError):
    """An environment server did not answer a request usably."""


@dataclasses.dataclass(frozen=True)
class Transport:
    """Requests to one server. ``url``: its base URL (``http://127.0.0.1:36001``)."""

    url: str
    timeout: float = 60.0
    retries: int = 3
    backoff: float = 0.5

    def __post_init__(self):
        parsed = urllib.parse.urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"not an http(s) base URL: {self.url!r}")
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0:
            raise ValueError(f"need timeout > 0, retries >= 0, backoff >= 0; got {self.timeout}, "
                             f"{self.retries}, {self.backoff}")

    def post(self, path: str, body: dict | None = None) -> Any:
        """POST ``body`` as JSON (no body when None); the reply's JSON."""
        data = None if body is None else json.dumps(body).encode()
        return self._request("POST", self._address(path), data)

    def get(self, path: str, **query: Any) -> Any:
        """GET with ``query`` parameters; the reply's JSON."""
        return self._request("GET", self._address(path, query), None)

    def _address(self, path: str, query: dict | None = None) -> str:
        address = f"{self.url.rstrip('/')}/{path.lstrip('/')}"
        return f"{address}?{urllib.parse.urlencode(query)}" if query else address

    def _request(self, method: str, address: str, data: bytes | None) -> Any:
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(address, data, method=method,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as e:
                failure = f"HTTP {e.code}: {_text(e.read())}"
                if e.code < 500:
                    break
                continue
            except OSError as e:  # refused, reset, timed out (URLError is one)
                failure = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
                continue
            return _reply(raw, f"{method} {address}")
        tries = f" after {attempt + 1} tries" if attempt else ""
        raise ServerError(f"{method} {address}: {failure}{tries}")


def _reply(raw: bytes, request: str) -> Any:
    try:
        reply = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ServerError(f"{request}: the reply is not JSON: {_text(raw)}") from None
    if isinstance(reply, dict) and "error" in reply:
        raise ServerError(f"{request}: the server says: {reply['error']}")
    return reply


def _text(raw: bytes, limit: int = 200) -> str:
    return raw[:limit].decode("utf-8", "replace").strip() or "(empty body)"
