"""Loopback and address helpers shared by the launchers, the emulator and the tests.

Every server the tuner starts, and every test server, listens on a port chosen here;
clients reach a server bound to a wildcard address through loopback.
"""

from __future__ import annotations

import errno
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listened on a moment ago (bind to port 0 and
    release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def connect_host(bind_host: str) -> str:
    """Where a client on the same host connects to reach a server bound to ``bind_host``:
    wildcard addresses are reached through loopback."""
    if bind_host in ("", "0.0.0.0", "*"):
        return "127.0.0.1"
    if bind_host in ("::", "[::]"):
        return "::1"
    return bind_host


def http_url(host: str, port: int) -> str:
    """``http://host:port`` with IPv6 literals in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def local_port_in_use(bind_host: str, port: int) -> bool:
    """True when a server could not listen on ``bind_host:port`` here: something accepts
    connections on it, or binding it fails with "address in use"."""
    target = connect_host(bind_host)
    try:
        with socket.create_connection((target, port), timeout=0.5):
            return True
    except OSError:
        pass
    try:
        infos = socket.getaddrinfo(bind_host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False
