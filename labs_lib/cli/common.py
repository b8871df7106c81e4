"""What every command shares: one-line argparse errors, byte formatting, tables, the server-target flags."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import NoReturn

from ..errors import BadInput


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line instead of usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def fmt_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{int(n):,} B ({n / size:,.2f} {unit})"
    return f"{int(n):,} B"


def print_table(rows: Sequence[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, default=str))


def add_target_arguments(parser, *, endpoint_help: str, model_help: str) -> None:
    """--endpoint / --base-url / --api-key-env / --model, the way every command that talks to a server takes them."""
    parser.add_argument("--endpoint", help=endpoint_help)
    parser.add_argument("--base-url", help="any OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    parser.add_argument("--api-key-env", help="NAME of the environment variable holding the key")
    parser.add_argument("--model", help=model_help)


def chosen_target(args, allowed: str = "exactly one of --endpoint NAME or --base-url URL") -> str:
    """The one of --endpoint and --base-url that was given, or BadInput."""
    if bool(args.endpoint) == bool(args.base_url):
        raise BadInput("endpoint", args.endpoint or args.base_url or "none", "allowed: " + allowed)
    return args.endpoint or args.base_url
