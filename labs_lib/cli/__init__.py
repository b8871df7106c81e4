"""`labs …` (or `python -m labs_lib …`): the command line users and tests share.

One module per command; each registers its flags and imports the library only when it runs, so
`--help` and small commands stay fast. Bad input exits 2 with one line naming the value and what
is allowed; other LabsErrors exit 1.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

from ..errors import BadInput, LabsError
from .common import Parser

COMMANDS = ("models", "kv", "capacity", "run", "serve", "bench", "sweep", "quant", "doctor", "workshop_model")


def build_parser() -> Parser:
    parser = Parser(prog="labs", description="LLM Inference Labs command line.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"warning: {message}", file=file or sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _one_line_warning  # a user reads what happened, not which source line said so
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LabsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `labs models | head`: the reader left; what it read is all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout
        return 0
