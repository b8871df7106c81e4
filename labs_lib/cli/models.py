"""`models`: the model catalogue."""

from __future__ import annotations

import argparse

from .common import print_json


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list the model catalogue")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..models import catalogue, load_model

    rows = []
    for hf_id, entry in catalogue().items():
        spec = load_model(hf_id)
        rows.append(
            {
                "id": hf_id,
                "aliases": entry["aliases"],
                "attention": spec.attention,
                "layers": spec.num_layers,
                "q_heads": spec.num_q_heads,
                "kv_heads": spec.num_kv_heads,
                "head_dim": spec.head_dim,
                "sliding": f"{spec.num_sliding_layers}x{spec.sliding_window}" if spec.sliding_window else "",
                "params_b": round(spec.params / 1e9, 2) if spec.params else None,
            }
        )
    if args.json:
        print_json(rows)
        return 0
    print(f"{'id':<34} {'attention':<9} {'layers':>6} {'q/kv heads':>10} {'head_dim':>8} {'sliding':>8} {'params':>8}  aliases")
    for r in rows:
        print(
            f"{r['id']:<34} {r['attention']:<9} {r['layers']:>6} {str(r['q_heads']) + '/' + str(r['kv_heads']):>10} "
            f"{r['head_dim'] or '-'!s:>8} {r['sliding']:>8} {str(r['params_b']) + 'B':>8}  {', '.join(r['aliases'])}"
        )
    return 0
