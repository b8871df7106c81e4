"""Build data/length_distributions.json from the Azure LLM inference trace 2023 (CC-BY 4.0): each trace's
context and generated token counts as quantiles, and their rank correlation. The trace itself is not shipped.

    python tools/length_distributions.py AzureLLMInferenceTrace_conv.csv AzureLLMInferenceTrace_code.csv

The CSVs are data/AzureLLMInferenceTrace_{conv,code}.csv of https://github.com/Azure/AzurePublicDataset
(AzureLLMInferenceDataset2023.md; Patel et al., "Splitwise: Efficient generative LLM inference using phase
splitting", ISCA 2024).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

QUANTILES = [round(q, 3) for q in np.linspace(0, 1, 41)]
OUT = Path(__file__).resolve().parents[1] / "data" / "length_distributions.json"
SOURCE = "https://github.com/Azure/AzurePublicDataset/blob/master/AzureLLMInferenceDataset2023.md"


def summarize(path: Path) -> dict:
    trace = pd.read_csv(path)
    context, generated = trace["ContextTokens"], trace["GeneratedTokens"]
    kind = "conversation" if "conv" in path.name else "code"
    return {
        "description": f"Azure LLM inference trace 2023, {kind} service (one hour of requests, November 2023)",
        "source": SOURCE,
        "file": f"data/AzureLLMInferenceTrace_{'conv' if kind == 'conversation' else 'code'}.csv",
        "license": "CC-BY 4.0: Patel et al., Splitwise: Efficient generative LLM inference using phase splitting, ISCA 2024",
        "requests": len(trace),
        "quantiles": QUANTILES,
        "context_tokens": [round(float(v), 1) for v in np.quantile(context, QUANTILES)],
        "generated_tokens": [round(float(v), 1) for v in np.quantile(generated, QUANTILES)],
        "rank_correlation": round(float(np.corrcoef(context.rank(), generated.rank())[0, 1]), 3),
    }


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]]
    out = {
        "_about": (
            "Request lengths of recorded production traces, as quantiles of each marginal (context tokens, generated "
            "tokens) and their Spearman rank correlation; built by tools/length_distributions.py from the traces "
            "named in each entry (the traces are not shipped). labs_lib.lengths samples from them."
        ),
        "distributions": {("azure-conv-2023" if "conv" in p.name else "azure-code-2023"): summarize(p) for p in paths},
    }
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
