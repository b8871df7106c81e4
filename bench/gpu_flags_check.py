"""Every `vllm serve` flag the labs can emit (labs_lib.engines.vllm.emitted_flags over every vLLM grid, quick and
full, and an EngineConfig with every field set), checked against one vLLM's own `serve --help=all` output.

python bench/gpu_flags_check.py HELP_FILE   # exit 1 naming each flag that vLLM does not know

Run by bench/gpu_install_check.sh against the GPU set's vLLM.
"""

from __future__ import annotations

import sys
from pathlib import Path

from labs_lib.engines.vllm import emitted_flags, parse_help_flags, unknown_flags
from labs_lib.sweep import grid_configs


def main(argv: list[str]) -> int:
    help_flags = frozenset(parse_help_flags(Path(argv[0]).read_text()))
    if not help_flags:
        print(f"no flags in {argv[0]}: is it `vllm serve --help=all` output?")
        return 1
    flags = emitted_flags(grid_configs("vllm"))
    missing = unknown_flags(list(flags), help_flags)
    for flag in missing:
        print(f"unknown to this vLLM: {flag} (from {flags[flag]})")
    print(f"{len(flags) - len(missing)} of {len(flags)} flags known to this vLLM ({len(help_flags)} in its help)")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
