"""One HTTP POST bounded in time and in memory, whatever the server does.

`urllib`'s timeout bounds each wait for bytes, not the request: a server that sends one byte a
second keeps a request alive for ever, and a reply body without end fills memory. Here a
watchdog shuts the connection's socket down when the whole request (connect, send, status,
headers and body) has taken `timeout_s`, and at most `max_body` bytes of the reply are read.
Proxies from the environment and TLS work as they do for `urllib.request.urlopen`.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_BODY = 64 * 1024  # an OTLP export reply is a few bytes; anything longer is not one


class RequestTimeoutError(TimeoutError):
    """The whole request took longer than its timeout."""


class BodyTooLargeError(OSError):
    """The reply body is longer than the limit."""


@dataclass(frozen=True)
class Reply:
    """A complete reply: its status, reason phrase and body."""

    status: int
    reason: str
    body: bytes


class _Watch:
    """The sockets of one request, and the watchdog that cuts them at the deadline."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []
        self.expired = False
        self.done = threading.Event()
        self._lock = threading.Lock()

    def connection(
        self, cls: type[http.client.HTTPConnection], **extra: Any
    ) -> Callable[..., http.client.HTTPConnection]:
        """Return a factory of `cls` connections whose sockets this watch cuts."""

        def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            made = cls(host, **kwargs, **extra)
            connect = made.connect

            def watched_connect() -> None:
                connect()
                # The socket itself: a reply read to its end holds it after the connection
                # has let go of it.
                self._add(made.sock)

            made.connect = watched_connect  # type: ignore[method-assign]
            return made

        return make

    def _add(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self.sockets.append(sock)
            expired = self.expired
        if expired:  # connected after the deadline: cut before it is used
            _cut(sock)

    def run(self, timeout_s: float) -> None:
        """Wait for the request; at the deadline, cut its sockets."""
        if self.done.wait(timeout_s):
            return
        with self._lock:
            self.expired = True
            sockets = list(self.sockets)
        for sock in sockets:
            _cut(sock)


def _cut(sock: socket.socket) -> None:
    """Shut the socket down: a thread blocked reading it wakes up with end-of-file."""
    with contextlib.suppress(OSError):  # already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # for TLS too: the plain socket's


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self._watch = watch

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._watch.connection(http.client.HTTPConnection), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watch: _Watch, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self._watch = watch
        self._tls_context = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        factory = self._watch.connection(http.client.HTTPSConnection, context=self._tls_context)
        return self.do_open(factory, req)


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout_s: float,
    context: ssl.SSLContext | None = None,
    max_body: int = MAX_BODY,
) -> Reply:
    """POST `body` to `url`; return the reply, whatever its status.

    Raises:
        RequestTimeoutError: the request took longer than `timeout_s` in all.
        BodyTooLargeError: the reply body is longer than `max_body` bytes.
        OSError, http.client.HTTPException: the connection failed or the reply is not HTTP.

    """
    watch = _Watch()
    opener = urllib.request.build_opener(_HTTPHandler(watch), _HTTPSHandler(watch, context))
    watchdog = threading.Thread(
        target=watch.run, args=(timeout_s,), name="looptrace-replay-deadline", daemon=True
    )
    watchdog.start()
    try:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            response = opener.open(request, timeout=timeout_s)
        except urllib.error.HTTPError as error:
            response = error  # an error status is a reply too
        with response:
            status = response.status if response.status is not None else 0
            reason = str(response.reason)
            data = response.read(max_body + 1)
    except (OSError, http.client.HTTPException, ValueError):
        if watch.expired:
            raise RequestTimeoutError(f"no complete reply within {timeout_s:g} s") from None
        raise
    finally:
        watch.done.set()
        watchdog.join()
    if watch.expired:
        raise RequestTimeoutError(f"no complete reply within {timeout_s:g} s")
    if len(data) > max_body:
        raise BodyTooLargeError(f"a reply body over {max_body // 1024} KiB")
    return Reply(status, reason, data)
