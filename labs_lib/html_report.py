"""An executed run as static HTML: a page per notebook, its figures embedded, and an index page linking them, to read
a run without running it (a participant previewing a lab, a facilitator checking a machine against it). The pages
need no server; online, MathJax and require.js load from a CDN, offline the pages read the same with formulas as TeX.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput


@dataclass(frozen=True)
class Page:
    """One executed notebook, rendered: its file, title, seconds it ran, and the cells whose output is an error."""

    html_name: str
    title: str
    duration_s: float | None
    error_cells: int


def _page(executed: Path, out_dir: Path) -> Page:
    from nbconvert import HTMLExporter

    nb = json.loads(executed.read_text())
    first = next((c for c in nb["cells"] if c["cell_type"] == "markdown"), None)
    title = "".join(first["source"]).splitlines()[0].lstrip("# ").strip() if first else executed.stem
    errors = sum(any(o.get("output_type") == "error" for o in c.get("outputs", [])) for c in nb["cells"])
    body, _ = HTMLExporter(template_name="lab", embed_images=True).from_filename(str(executed))
    name = executed.stem + ".html"
    (out_dir / name).write_text(body)
    return Page(name, title, (nb["metadata"].get("papermill") or {}).get("duration"), errors)


def render(run_dir: Path) -> Path:
    """Write run_dir/html/<notebook>.html for each executed notebook of `run_dir` and run_dir/html/index.html;
    return the index."""
    notebooks = sorted(Path(run_dir).glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        raise BadInput("run folder", str(run_dir), "allowed: a folder of executed notebooks (labs run's --out, or runs/latest)")
    out_dir = Path(run_dir) / "html"
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = [_page(nb, out_dir) for nb in notebooks]
    rows = "\n".join(
        f'<tr><td><a href="{p.html_name}">{html.escape(p.title)}</a></td>'
        f"<td>{'' if p.duration_s is None else f'{p.duration_s:.0f} s'}</td>"
        f"<td>{'ok' if not p.error_cells else f'{p.error_cells} cells failed'}</td></tr>"
        for p in pages
    )
    index = out_dir / "index.html"
    index.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>LLM Inference Labs: an executed run</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td{padding:.3em 1em}</style></head><body>"
        f"<h1>LLM Inference Labs: an executed run</h1><p>{html.escape(str(Path(run_dir).resolve()))}</p>"
        f"<table><tr><th>lab</th><th>ran</th><th>cells</th></tr>\n{rows}\n</table></body></html>\n"
    )
    return index
