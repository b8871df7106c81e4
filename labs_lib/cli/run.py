"""`run`: execute the lab notebooks headlessly (papermill)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="execute the lab notebooks headlessly (papermill)")
    p.add_argument("--only", help="comma-separated lab numbers, e.g. 01,03")
    p.add_argument("--engine", default="auto", help="auto (default), llamacpp or vllm")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"), help="a notebook parameter")
    p.add_argument("--out", help="folder for the executed notebooks (default runs/<timestamp>)")
    p.add_argument("--full", action="store_true", help="full sizes instead of quick ones")
    p.add_argument(
        "--as-written",
        action="store_true",
        help="run the build-it cells and exercises as the notebooks hold them (default, as CI does: the library's reference in each "
        "build-it cell, and every exercise and design task shows its answer)",
    )
    p.add_argument("--html", action="store_true", help="also render the executed notebooks as static HTML, with an index page")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import LabsError
    from ..paths import NOTEBOOKS_DIR
    from ..runner import discover, parse_value, run_series

    params = {}
    for name, value in args.param or []:
        params[name] = parse_value(value)
    notebooks = discover(args.only)
    if not notebooks:
        raise LabsError(f"no lab notebooks found in {NOTEBOOKS_DIR}")
    results = run_series(
        notebooks,
        params=params,
        engine=args.engine,
        quick=not args.full,
        out_dir=Path(args.out) if args.out else None,
        fill_in=not args.as_written,
    )
    failed = [r for r in results if r.status != "ok"]
    total = sum(r.wall_s for r in results)
    print(
        f"{len(results) - len(failed)}/{len(results)} notebooks ok in {total:.1f} s; executed copies in {results[0].output.parent}"
    )
    if args.html:
        from ..html_report import render

        print(f"readable without running: {render(results[0].output.parent)}")
    return 1 if failed else 0
