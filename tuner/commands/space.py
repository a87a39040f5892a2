"""``tuner space``: the search-space format (its JSON schema) and the packaged spaces."""

from __future__ import annotations

import argparse
import json

from tuner.errors import UsageError
from tuner.space import load_space, resolve_space
from tuner.space.loader import packaged_spaces
from tuner.space.schema import SpaceFile
from tuner.statement import workload_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "space",
        help="the search-space format: JSON schema (--schema), packaged spaces, a space's parameters",
        description="Without arguments, list the packaged search spaces. With a space (file or packaged "
        "name), print its hardware, model, workload and parameters. --schema prints the JSON schema of "
        "a space file, generated from the models that validate it (a file may also say 'extends: "
        "<space>' to start from another space; that key is resolved before validation).",
    )
    p.add_argument("space", nargs="?", help="search-space file or packaged space name")
    p.add_argument("--schema", action="store_true", help="print the JSON schema of a space file")
    p.set_defaults(handler=run)


def schema() -> dict:
    """The JSON schema of a space file (pydantic's, from :class:`tuner.space.schema.SpaceFile`)."""
    doc = SpaceFile.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "tuner search space"
    return doc


def run(args: argparse.Namespace) -> int:
    if args.schema:
        print(json.dumps(schema(), indent=2))
        return 0
    if not args.space:
        print("packaged spaces (tuner search --space NAME; tuner space NAME for details):")
        for name in packaged_spaces():
            print(f"  {name}")
        return 0
    try:
        space = load_space(resolve_space(args.space))
    except (OSError, LookupError) as exc:
        raise UsageError(str(exc)) from exc
    print(f"space {space.name} ({space.source}): engine {space.spec.engine}")
    print(f"  hardware {space.hardware}, model {space.model}")
    print(f"  workload: {workload_text(space.workload)}")
    for name, p in space.parameters.items():
        print(f"  {name}: {p.model_dump(exclude_none=True, exclude_defaults=True)}")
    return 0
