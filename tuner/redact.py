"""The one redaction step: every text the tuner stores or prints passes :func:`text`.

The tuner knows the secret values in force (the Hugging Face token, the storage URL's
password, any value registered with :func:`register`); a server log tail, a failure
reason, a dashboard note or a printed line that contains one of them shows ``***``
instead. Matching is on the values themselves, so a secret leaks through no wording.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

MASK = "***"
#: Values this short would mask ordinary words; no real token or password is this short.
MIN_SECRET_CHARS = 4

_secrets: set[str] = set()
_lock = threading.Lock()


def register(*values: str | None) -> None:
    """Add secret values to redact from now on (empty or very short values are ignored)."""
    with _lock:
        for v in values:
            if v and len(v) >= MIN_SECRET_CHARS:
                _secrets.add(v)


def url_password(url: str | None) -> str | None:
    """The password of a database URL (``scheme://user:password@host/db``), if any."""
    if not url or "://" not in url:
        return None
    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


def register_url(url: str | None) -> None:
    """Register the password of a storage URL (raw and percent-decoded forms)."""
    password = url_password(url)
    if password:
        raw = url.split("://", 1)[1].rsplit("@", 1)[0].split(":", 1)[1] if url else None
        register(password, raw)


def secrets() -> list[str]:
    """The registered values, longest first (so a value containing another is masked whole)."""
    with _lock:
        return sorted(_secrets, key=len, reverse=True)


def text(value: str) -> str:
    """``value`` with every known secret replaced by :data:`MASK`."""
    for secret in secrets():
        if secret in value:
            value = value.replace(secret, MASK)
    return value


def deep(value: Any) -> Any:
    """:func:`text` applied to every string in a JSON-like value (dicts, lists)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {k: deep(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [deep(v) for v in value]
    return value


def file(path: Path, chunk: int = 1 << 20) -> None:
    """Redact a file in place (a server log on disk), when it contains a known secret."""
    known: Iterable[bytes] = [s.encode() for s in secrets()]
    if not known:
        return
    try:
        data = path.read_bytes()
    except OSError:
        return
    if not any(s in data for s in known):
        return
    for s in known:
        data = data.replace(s, MASK.encode())
    tmp = path.with_name(path.name + ".redacting")
    tmp.write_bytes(data)
    tmp.replace(path)
