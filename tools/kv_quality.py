"""Build data/kv_quality.json from lab 05's saved comparisons: what each KV cache dtype costs in quality (KL from the
same engine's 16-bit cache, nats/token, with its 95% interval), for lab 01's design task (design_tasks.kv_dtype_costs).

    python tools/kv_quality.py results/lab06/configurations-llamacpp.csv results/lab06/configurations-vllm.csv \
        --note "lab 05 quick, headless, 2026-12-02, commit …, 2-vCPU AMD EPYC"

Each CSV is lab 05's table (quant_compare.compare_variants); its engine is read from the file name. The rows kept
are the reference weights with another KV dtype: the KV cache's own cost, the weights unchanged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

OUT = Path(__file__).resolve().parents[1] / "data" / "kv_quality.json"
# each engine's 16-bit cache, the reference, in labs_lib.kv_math's names: llama.cpp's f16; vLLM's cache is the model's
# own dtype (--kv-cache-dtype auto: Gemma 3's bf16), which lab 05's table writes as f16 beside llama.cpp's
REFERENCE_KV = {"llamacpp": "fp16", "vllm": "bf16"}
CANONICAL = {"f16": "fp16"}


def kv_rows(path: Path) -> tuple[str, dict, list[dict]]:
    engine = next((e for e in REFERENCE_KV if f"-{e}" in path.stem), None)
    if engine is None:
        raise SystemExit(f"{path}: the file name must name its engine (lab 05's configurations-<engine>.csv)")
    table = pd.read_csv(path)
    # the weights of a row: llama.cpp's variant; vLLM's --dtype, and its --quantization where one is set
    if "variant" in table:
        table["weights"] = table["variant"]
    else:
        quantized = table["quantization"].fillna("-").astype(str) != "-"
        table["weights"] = table["dtype"].where(~quantized, table["dtype"] + ", " + table["quantization"].astype(str))
    reference = table.iloc[0]  # lab 05's first row is its reference configuration
    same_weights = table[(table.weights == reference.weights) & (table.kv_dtype != reference.kv_dtype)]
    ref = {"engine": engine, "kv_dtype": REFERENCE_KV[engine], "weights": str(reference.weights)}
    rows = [
        {
            "engine": engine,
            "kv_dtype": CANONICAL.get(str(r.kv_dtype), str(r.kv_dtype)),
            "kl": round(float(r.kl), 5),
            "kl_ci_low": round(float(r.kl_ci_low), 5),
            "kl_ci_high": round(float(r.kl_ci_high), 5),
            "weights": str(r.weights),
        }
        for r in same_weights.itertuples()
    ]
    return engine, ref, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", type=Path, help="lab 05's configurations-<engine>.csv")
    parser.add_argument("--note", required=True, help="where and when the runs were made")
    args = parser.parse_args()
    references, rows = [], []
    for path in args.csv:
        _, ref, found = kv_rows(path)
        references.append(ref)
        rows += found
    OUT.write_text(
        json.dumps(
            {
                "_about": (
                    "KL divergence (nats/token, top-20 lower bound, 95% block-bootstrap interval) of each KV cache dtype "
                    "against the same engine's 16-bit cache, the weights unchanged, measured by lab 05 "
                    "(quant_compare.compare_variants) on the labs' Gemma 3 270M, scoring data/texts/eval.txt. "
                    "Built by tools/kv_quality.py. " + args.note
                ),
                "references": references,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {OUT}: {len(rows)} KV dtypes beside {len(references)} references")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
