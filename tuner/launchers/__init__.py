"""Launchers: start a serving engine for one trial, wait until it serves, stop it.

Backends (``--backend``):

* ``local``: a child process of the tuner on this host (:class:`LocalLauncher`);
* ``ssh``: a process on another host through the system ``ssh`` (:class:`SshLauncher`);
* ``systemd``: a systemd unit, here or over ssh (:class:`SystemdLauncher`).

All share :class:`Launcher`'s interface and failure classes (:mod:`tuner.failures`),
classified by the engine's :meth:`~tuner.engines.base.Engine.classify_exit`
(:func:`tuner.launchers.classify.classify_failure`). The remote backends reach their
host through :mod:`tuner.transports.ssh`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.launchers.base import Launcher
from tuner.launchers.classify import classify_failure

if TYPE_CHECKING:
    from tuner.engines.base import Engine
    from tuner.transports.ssh import SshTransport

#: ``--backend`` names of the launchers in this package.
BACKENDS: tuple[str, ...] = ("local", "ssh", "systemd")


def make_launcher(
    backend: str,
    *,
    engine: Engine | None = None,
    ssh: SshTransport | str | None = None,
    **options: Any,
) -> Launcher:
    """The launcher for ``backend``.

    ``ssh``: the destination (or a configured :class:`~tuner.transports.ssh.SshTransport`);
    required for ``ssh``, optional for ``systemd`` (a unit on a remote host). Other
    keyword options go to the launcher's constructor (``stop_grace_s``,
    ``remote_dir``, ``unit_dir``...).
    """
    if backend == "local":
        from tuner.launchers.local import LocalLauncher

        return LocalLauncher(engine, **options)
    if backend == "ssh":
        from tuner.launchers.ssh import SshLauncher

        if ssh is None:
            raise ValueError("the ssh backend needs a host (ssh=...)")
        return SshLauncher(ssh, engine, **options)
    if backend == "systemd":
        from tuner.launchers.systemd import SystemdLauncher

        return SystemdLauncher(engine, ssh=ssh, **options)
    raise ValueError(f"unknown launcher backend {backend!r}; known: {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Launcher", "classify_failure", "make_launcher"]
