"""Reading space files: YAML without duplicate keys, ``extends`` inheritance, and the
spaces that ship with tuner, found by name from any directory."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tuner.space.errors import SpaceError
from tuner.space.runtime import Space
from tuner.space.schema import SPACE_SUFFIXES

#: The space ``tuner`` uses when none is named: the reference host and model.
DEFAULT_SPACE = "kimi-k2.6-8x-rtx-pro-6000"


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML would silently keep the last one)."""


def _mapping_without_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key]})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        except TypeError:
            pass  # unhashable key: construct_mapping reports it
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _read_yaml(path: Path, source: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpaceError(source, [(None, "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(source, [(None, f"cannot read: {exc}")]) from None
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        raise SpaceError(source, [(where, f"YAML syntax error: {exc.problem}")]) from None
    except yaml.YAMLError as exc:
        raise SpaceError(source, [(None, f"YAML syntax error: {exc}")]) from None


def _space_dirs() -> list[Path]:
    """Folders holding packaged spaces: the installed package data, then (for a source
    checkout where the package-data link is not materialised) the repository's folder."""
    dirs = [
        Path(str(resources.files("tuner") / "data" / "spaces")),
        Path(__file__).resolve().parents[2] / "search_spaces",
    ]
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and all(d.resolve() != o.resolve() for o in out):
            out.append(d)
    return out


def packaged_spaces() -> list[str]:
    """Names of the spaces that ship with tuner."""
    return sorted({p.stem for d in _space_dirs() for p in d.iterdir() if p.suffix in SPACE_SUFFIXES})


def resolve_space(name_or_path: str | Path) -> Path:
    """The file a space argument means: an existing path, else a packaged space by name
    (``kimi-k2.6-8x-rtx-pro-6000``, with or without ``.yaml``)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    name = str(name_or_path)
    if "/" not in name and "\\" not in name:
        stem = name[: -len(path.suffix)] if path.suffix in SPACE_SUFFIXES else name
        for d in _space_dirs():
            for suffix in SPACE_SUFFIXES:
                candidate = d / f"{stem}{suffix}"
                if candidate.is_file():
                    return candidate
    known = ", ".join(packaged_spaces()) or "(none)"
    what = "is a folder, not a space file" if path.is_dir() else "no such file or packaged space"
    raise SpaceError(name, [(None, f"{what}; packaged spaces: {known}")])


def load_space(path: str | Path) -> Space:
    """Load and validate a space file (a path, or a packaged space's name).

    Raises :class:`SpaceError` (a UsageError: exit code 2) naming the file and the field
    of every problem found: YAML syntax (with its line), unknown keys, wrong types, bad
    or unknown names in expressions, unknown engine/hardware/model ids.
    """
    file = resolve_space(path)
    source = str(path) if Path(path).expanduser().is_file() else str(file)
    data = _with_base(_read_yaml(file, source), file, source, seen=(file.resolve(),))
    return Space.from_dict(data, source=source, base_dir=file.parent)


def _with_base(data: Any, file: Path, source: str, seen: tuple[Path, ...]) -> Any:
    """Resolve ``extends: <space>``: the base file's document, overridden key by key.

    Mappings merge recursively; any other value (lists included) replaces the base's. The
    base is found like ``--space`` (a path relative to this file, or a packaged name).
    """
    if not isinstance(data, dict) or "extends" not in data:
        return data
    base_name = data.pop("extends")
    if not isinstance(base_name, str):
        raise SpaceError(source, [("extends", "must be a space name or a path")])
    relative = file.parent / base_name
    base_file = resolve_space(relative if relative.is_file() else base_name)
    if base_file.resolve() in seen:
        raise SpaceError(source, [("extends", f"circular: {base_name} extends this file again")])
    base = _with_base(
        _read_yaml(base_file, str(base_file)), base_file, str(base_file), (*seen, base_file.resolve())
    )
    if not isinstance(base, dict):
        raise SpaceError(source, [("extends", f"{base_file} is not a mapping")])
    return _merge(base, data)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out
