"""Every `vllm serve` flag the project can emit, checked against one vLLM's own `serve --help=all` output.

python bench/gpu_flags_check.py HELP_FILE   # exit 1 naming each flag that vLLM does not know

The flags come from labs_lib.engines.vllm.serve_args over every configuration of every vLLM grid in
data/grids/ (not the articles' own grids, article_*.yaml, whose removed flags lab 03 reports) and over one configuration that sets every EngineConfig field serve_args reads.
Run by bench/gpu_install_check.sh against the GPU set's vLLM.
"""

from __future__ import annotations

import sys
from pathlib import Path

from labs_lib.engines import EngineConfig
from labs_lib.engines.vllm import parse_help_flags, serve_args, unknown_flags
from labs_lib.paths import DATA_DIR
from labs_lib.sweep import load_grid

EVERY_FIELD = EngineConfig(
    model="org/model",
    served_model_name="m",
    max_model_len=4096,
    gpu_memory_utilization=0.5,
    kv_cache_gib=1,
    parallel=8,
    batch_tokens=2048,
    prompt_cache=False,
    chunked_prefill=False,
    kv_cache_dtype="fp8",
    attention_backend="FLASH_ATTN",
    quantization="fp8",
    dtype="bfloat16",
    block_size=16,
    tensor_parallel_size=1,
    enforce_eager=True,
)


def emitted_flags() -> dict[str, str]:
    """flag -> where it came from (a grid file, or EngineConfig)."""
    found: dict[str, str] = {}
    configs = [
        ("EngineConfig (every field)", EVERY_FIELD),
        ("EngineConfig (on, not off)", EVERY_FIELD.with_(prompt_cache=True, chunked_prefill=True)),
    ]
    for path in sorted(p for p in (DATA_DIR / "grids").glob("*.yaml") if not p.name.startswith("article_")):
        for quick in (False, True):
            grid = load_grid(path, quick=quick)
            if grid.engine == "vllm":
                configs += [(path.name, EngineConfig(**cfg)) for cfg in grid.configs()]
    for origin, config in configs:
        for arg in serve_args(config.validated()):
            if arg.startswith("--"):
                found.setdefault(arg.split("=")[0], origin)
    return found


def main(argv: list[str]) -> int:
    help_flags = frozenset(parse_help_flags(Path(argv[0]).read_text()))
    if not help_flags:
        print(f"no flags in {argv[0]}: is it `vllm serve --help=all` output?")
        return 1
    flags = emitted_flags()
    missing = unknown_flags(list(flags), help_flags)
    for flag in missing:
        print(f"unknown to this vLLM: {flag} (from {flags[flag]})")
    print(f"{len(flags) - len(missing)} of {len(flags)} flags known to this vLLM ({len(help_flags)} in its help)")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
