"""Former name of :mod:`tuner.systemd_unit` (systemd units, not physical units); kept so
that existing imports keep working."""

from tuner.systemd_unit import looks_secret, parse_shell, render_shell, render_systemd_unit, systemd_quote

__all__ = ["looks_secret", "parse_shell", "render_shell", "render_systemd_unit", "systemd_quote"]
