"""``tuner dashboard``: optuna-dashboard on a study, with its notes and artifacts.

How it runs: in this process, as optuna-dashboard's WSGI application
(``optuna_dashboard.wsgi``) behind a threaded ``wsgiref`` server, rather than
``run_server`` or the ``optuna-dashboard`` console script in a child process:

* the study is found exactly as ``tuner best`` finds it (``load_study``), and the
  storage that was opened is handed over as an object: a database password never
  appears on a command line (visible in ``ps``) and no second resolution can pick
  another study;
* the socket is bound before the URL is printed, so a busy port is a clear error
  rather than a URL that does not answer, and ``--port 0`` prints the port it got;
* there is no child process to supervise or to leave behind; Ctrl-C or SIGTERM stop
  the server and close the socket;
* ``run_server`` serves one request at a time through bottle's default server and
  prints its own banner; the threaded server answers the page's parallel API calls.

Loopback (127.0.0.1) is the default: the dashboard can edit notes and delete
artifacts, so binding another address is a choice the user makes explicitly.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from socketserver import ThreadingMixIn
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from loguru import logger

from tuner.commands._common import add_study_args, study_storage
from tuner.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        help="open a study in optuna-dashboard (notes, artifacts, plots) on a local port",
        description="Serve optuna-dashboard for a study: history, parameter importances, and each "
        "trial's note (per-level numbers, state and constraints in words, its systemd unit) and "
        "artifacts. Binds 127.0.0.1 unless --host says otherwise; Ctrl-C stops it.",
    )
    add_study_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument(
        "--artifact-dir",
        type=Path,
        help="artifact directory (default: <study>-artifacts next to the study's database, "
        "studies/<study>-artifacts/)",
    )
    p.set_defaults(handler=run)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    """Request lines go to the debug log, not to the terminal."""

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("dashboard: " + format % args)


def dashboard_url(host: str, port: int, study_id: int) -> str:
    """The study's page: ``http://HOST:PORT/dashboard/studies/<id>``."""
    shown = host
    if host in ("", "0.0.0.0"):
        shown = "127.0.0.1"
    elif host == "::":
        shown = "::1"
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/dashboard/studies/{study_id}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: Names a browser on this machine uses for a loopback server.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_hosts(bound: str) -> frozenset[str]:
    """``Host:`` names the dashboard answers: loopback names, and the address it was bound
    to (a wildcard bind adds this machine's host name). Any other name is a page from
    another site reaching it through DNS rebinding, which could read the study."""
    names = set(LOOPBACK_NAMES)
    if bound in ("", "0.0.0.0", "::"):
        names.add(socket.gethostname().lower())
    else:
        names.add(bound.lower().strip("[]"))
    return frozenset(names)


def host_name(header: str) -> str:
    """The name of a ``Host:`` header, without its port (``[::1]:8080`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def check_host(app: Callable[..., Any], allowed: frozenset[str]) -> Callable[..., Any]:
    """WSGI middleware: 403 for a request whose ``Host:`` is not in ``allowed``."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if host_name(environ.get("HTTP_HOST", "")) not in allowed:
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"forbidden: unknown Host header\n"]
        return app(environ, start_response)

    return guarded


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from optuna.artifacts import FileSystemArtifactStore

    try:
        import optuna_dashboard
    except ImportError as exc:
        raise UsageError(
            "optuna-dashboard is not installed (a dependency of tuner): pip install optuna-dashboard"
        ) from exc

    from tuner import logging as tuner_logging
    from tuner.annotate import annotate_study, default_artifact_dir
    from tuner.storage import load_study, redact_url, resolve_storage

    tuner_logging.ensure_setup()
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, not {args.port}")
    try:
        url, _ = resolve_storage(args.study, study_storage(args))
        study = load_study(args.study, study_storage(args))
    except LookupError as exc:
        raise UsageError(str(exc)) from exc
    artifact_dir = args.artifact_dir or default_artifact_dir(url, study.study_name)
    if artifact_dir.exists() and not artifact_dir.is_dir():
        raise UsageError(f"--artifact-dir {artifact_dir} is not a directory")
    # The dashboard reads the database itself, not through Optuna's per-process cache.
    storage = getattr(study._storage, "_backend", study._storage)
    study_id = storage.get_study_id_from_name(study.study_name)
    app = check_host(
        optuna_dashboard.wsgi(storage, artifact_store=FileSystemArtifactStore(artifact_dir)),
        allowed_hosts(args.host),
    )
    try:
        server = make_server(
            args.host, args.port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    port = server.server_address[1]
    # The study's note says what was measured on what and how sure the winner is; written
    # here too, so a study searched by an older version or interrupted has it.
    annotate_study(study)
    print(
        f"optuna-dashboard for study {study.study_name} ({redact_url(url)}): "
        f"{dashboard_url(args.host, port, study_id)}",
        flush=True,
    )
    note_url = f"{dashboard_url(args.host, port, study_id)}/note"
    print(f"study note (workload, backend, the winner and its confidence): {note_url}", flush=True)
    have = "" if artifact_dir.is_dir() else " (none yet)"
    print(f"artifacts: {artifact_dir}{have}; Ctrl-C stops the server", flush=True)
    if not is_loopback(args.host):
        print(
            f"warning: listening on {args.host}, not loopback: anyone who can reach this port can read "
            "the study and edit its notes",
            file=sys.stderr,
            flush=True,
        )
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
    return 0
