"""What a GPU instance adds, checked in a few minutes (no network, PyTorch with CUDA): the card as NVML
reports it through labs_lib.gpu beside its data/gpus.json entry, lab 01 run with that card, and the
card's measured memory bandwidth for the roofline beside the catalogue's peak.

    python bench/gpu_smoke.py [--out DIR]      # bench/gpu_smoke.sh installs what it needs and runs this

Prints one line per check and PASS/FAIL; on a machine without a GPU it says so and exits 0. Not a CI
step: CI has no GPU. Its figures go into docs/performance.md with the date and card.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from labs_lib.catalogs import catalogue_name, gpu_spec
from labs_lib.gpu import read_gpus

from _common import header, verdict


def device_bandwidth_gb_s(seconds: float = 3.0) -> float:
    """Device-to-device copy of a 2 GiB buffer, read + write bytes per second (10^9 B/s)."""
    import torch

    n = 2**31 // 4
    src = torch.empty(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    copies, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        dst.copy_(src)
        copies += 1
    torch.cuda.synchronize()
    return 2 * src.numel() * 4 * copies / (time.perf_counter() - start) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for the executed lab 01 (default: a temporary one)")
    args = parser.parse_args()
    header("GPU smoke check")
    gpus, why = read_gpus()
    if not gpus:
        print(why)
        print("nothing to check without a GPU")
        return 0
    card = gpus[0]
    name = catalogue_name(card.name)
    print(f"NVML: {card.name}, {card.memory_total_bytes / 2**30:.2f} GiB total, {card.memory_used_bytes / 2**30:.2f} GiB used")
    checks = {"the card is in data/gpus.json": name is not None}
    if name:
        entry = gpu_spec(name)
        reported = card.memory_total_bytes / 2**30
        print(f"catalogue {name}: {entry['memory_gib']} GiB, {entry['bandwidth_gb_per_s']} GB/s peak")
        checks[f"catalogue memory within 1% of NVML's ({reported:.2f} GiB)"] = (
            abs(entry["memory_gib"] - reported) <= 0.01 * reported
        )
        measured = device_bandwidth_gb_s()
        print(f"measured device copy bandwidth {measured:,.0f} GB/s = {measured / entry['bandwidth_gb_per_s']:.0%} of peak")
        checks["measured bandwidth between 50% and 100% of the catalogue's peak"] = (
            0.5 <= measured / entry["bandwidth_gb_per_s"] <= 1.0
        )
        from labs_lib import runner

        out = Path(args.out or tempfile.mkdtemp(prefix="gpu-smoke-"))
        result = runner.run_series(runner.discover("01"), params={"gpu": name}, quick=True, out_dir=out, progress=False)[0]
        print(f"lab 01 with gpu={name}: {result.status} in {result.wall_s:.1f} s ({result.output})")
        checks["lab 01 runs with the card from NVML"] = result.status == "ok"
    return verdict(checks)


if __name__ == "__main__":
    raise SystemExit(main())
