"""Loopback addresses and free ports for the servers the tests start (no dependency)."""

from __future__ import annotations

import socket

LOCALHOST = "127.0.0.1"


def free_port() -> int:
    """Return a port the OS reports free on 127.0.0.1 (nothing listens there afterwards)."""
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])
