"""`sweep`: run a tuning grid (resumable; one JSONL row per point)."""

from __future__ import annotations

from pathlib import Path


def run(args) -> int:
    from ..load import run_blocking
    from ..sweep import dry_run, load_grid, run_sweep

    grid = load_grid(args.grid, quick=args.quick, engine=args.engine, model=args.model)
    if args.export_vllm_sweep:
        import shlex

        from ..vllm_interop import write_sweep_params

        command = write_sweep_params(grid, args.export_vllm_sweep)
        print(f"vLLM's own sweep of this grid ({len(grid.points())} points), its inputs in {args.export_vllm_sweep}:")
        print(shlex.join(command))
        return 0
    if args.dry_run:
        for line in dry_run(grid, device=args.device):
            print(line)
        return 0
    out = Path(args.out) if args.out else Path("results") / f"sweep-{grid.name}-{grid.engine}.jsonl"
    df = run_blocking(run_sweep(grid, out, progress=True))
    failed = int((df["status"] != "ok").sum()) if len(df) else 0
    print(f"{len(df)} point(s) in {out} ({failed} failed)")
    cols = [
        c
        for c in (
            "config.parallel",
            "config.ctx",
            "level.concurrency",
            "status",
            "summary.output_throughput",
            "summary.p50_ttft_ms",
            "summary.p99_ttft_ms",
            "summary.p50_tpot_ms",
        )
        if c in df.columns
    ]
    if cols:
        print(df[cols].to_string(index=False))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run a tuning grid (resumable; one JSONL row per point)")
    p.add_argument("--engine", help="an engine kind, as `labs serve --engine` takes (default: the grid's)")
    p.add_argument("--grid", required=True, help="a YAML grid, e.g. data/grids/cpu_batching.yaml")
    p.add_argument("--model", help="model (vLLM: an HF id or path; llama.cpp: a GGUF path)")
    p.add_argument("--out", help="results file (JSONL; default results/sweep-<grid>-<engine>.jsonl); re-run to resume")
    p.add_argument("--dry-run", action="store_true", help="print the engine commands, run nothing")
    p.add_argument(
        "--device",
        help="with --dry-run: cpu or gpu, the commands for that kind of machine (default: this one's; gpu on a CPU shows a card's)",
    )
    p.add_argument("--quick", action="store_true", help="the grid's quick variant (CI sizes)")
    p.add_argument(
        "--export-vllm-sweep",
        metavar="DIR",
        help="write the grid as `vllm bench sweep serve` inputs (serve_params.json, bench_params.json) and print its command",
    )
    p.set_defaults(func=run)
