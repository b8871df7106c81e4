"""The labs' design tasks: the participant proposes a configuration, the library judges it against the lab's own
numbers (the planner, or what the run measured) and says why. Like notebook.check_exercise, a hint comes first
and the best answer only when asked ("show")."""

from __future__ import annotations

import pandas as pd

from .errors import BadInput
from .kv_math import plan_capacity
from .notebook import SHOW, asked_to_show


def best_row(
    table: pd.DataFrame,
    *,
    limit_column: str,
    limit: float,
    objective: str,
    higher_is_better: bool = True,
    also: dict[str, float] | None = None,
) -> pd.Series | None:
    """The row with the best `objective` among those whose `limit_column` is below `limit` (and each `also` column
    at most its value); None if none is."""
    allowed = table[table[limit_column] < limit].dropna(subset=[objective])
    for column, maximum in (also or {}).items():
        allowed = allowed[allowed[column] <= maximum]
    if allowed.empty:
        return None
    return allowed.loc[allowed[objective].idxmax() if higher_is_better else allowed[objective].idxmin()]


def check_choice(
    label: str,
    design: dict | str | None,
    table: pd.DataFrame,
    *,
    keys: tuple[str, ...],
    limit_column: str,
    limit: float,
    objective: str,
    higher_is_better: bool = True,
    hint: str = "",
    limit_column_low: str | None = None,
    also: dict[str, float] | None = None,
) -> bool | None:
    """Judge a choice among measured rows (`design` names a row by `keys`): does it stay under the limit, and is it
    the best row that does? Prints one verdict; returns True/False, None when not answered.

    `also` adds limits every row must meet by its measured value ({column: maximum}, e.g. a TPOT SLO beside a KL
    budget): rows over any of them are out before the best is chosen.

    With `limit_column_low` (the low end of limit_column's confidence interval) the measurement cannot always say
    whether a row meets the limit: the best row by the measured value and the best row whose interval reaches
    under the limit are both accepted, the second with a note that more data would decide."""

    also = also or {}

    def best_under(column: str) -> pd.Series | None:
        return best_row(
            table, limit_column=column, limit=limit, objective=objective, higher_is_better=higher_is_better, also=also
        )

    best = best_under(limit_column)
    maybe = best_under(limit_column_low) if limit_column_low else None

    def named(row: pd.Series | None) -> str | None:
        return None if row is None else ", ".join(f"{k}={row[k]}" for k in keys)

    label = f" {label}" if label else ""
    name = ", ".join(keys)
    best_text = " or ".join(dict.fromkeys(n for n in (named(best), named(maybe)) if n)) or "no measured row meets it"
    if design is None:
        print(f"Design{label}: not answered yet: set design = {{{', '.join(repr(k) + ': ...' for k in keys)}}}. {hint}")
        return None
    if asked_to_show(design):
        print(f"Design{label}: the best measured choice is {best_text}.")
        return False
    if not isinstance(design, dict) or any(k not in design for k in keys):
        print(f"Design{label}: {design!r} is not allowed; allowed: a dict with {name}")
        return False
    rows = table
    for k in keys:
        rows = rows[rows[k].astype(str) == str(design[k])]
    if rows.empty:
        print(f"Design{label}: no measured row has {design}; choose among the rows the run measured ({name}).")
        return False
    row = rows.iloc[0]
    if over := next((c for c, maximum in also.items() if not row[c] <= maximum), None):
        print(f"Design{label}: {design} has {over} {row[over]:,.4g}, over the limit {also[over]:,.4g}. {hint}")
        return False
    if not row[limit_column_low or limit_column] < limit:
        print(f"Design{label}: {design} has {limit_column} {row[limit_column]:,.4g}, over the limit {limit:,.4g}. {hint}")
        return False
    if named(row) != named(best) and named(row) == named(maybe):
        print(
            f"Design{label}: correct as far as this measurement can tell: {design} has {limit_column} "
            f"{row[limit_column]:,.4g}, over the limit, but its interval reaches down to {row[limit_column_low]:,.4g}; "
            "more data (a longer run, more tokens) would decide."
        )
        return True
    if named(row) == named(best):
        print(
            f"Design{label}: correct: {design} meets {limit_column} < {limit:,.4g} with the best {objective} ({row[objective]:,.2f})."
        )
        return True
    better = "higher" if higher_is_better else "lower"
    print(
        f"Design{label}: {design} meets the limit, but another measured row has a {better} {objective} "
        f'than its {row[objective]:,.2f}. {hint} (answer "{SHOW}" to see it)'
    )
    return False


def check_capacity_design(
    design: dict | str | None, *, users: int = 50, seq_len: int = 8192, gpu: str = "L40S", gpu_memory_utilization: float = 0.9
) -> bool | None:
    """Lab 01's design task: `users` concurrent sequences of `seq_len` tokens on one `gpu`. `design` is
    {"model", "kv_dtype", "max_num_seqs"} (and optionally "weight_dtype"); it works when the planner's KV pool
    holds `users` sequences and max_num_seqs admits them."""
    task = f"{users} users at {seq_len:,} tokens on one {gpu} (gpu_memory_utilization {gpu_memory_utilization})"
    if design is None:
        print(
            f"Design: not answered yet: {task}. Set design = {{'model': ..., 'kv_dtype': ..., 'max_num_seqs': ...}}. "
            "Hint: the pool is what the weights leave (section 9); a smaller KV dtype or fewer KV heads (GQA) stretch it."
        )
        return None
    if asked_to_show(design):
        print(
            f"Design: {task}: the largest catalogue models that work: "
            + "; ".join(_capacity_designs(users, seq_len, gpu, gpu_memory_utilization)[:3])
        )
        return False
    if not isinstance(design, dict) or any(k not in design for k in ("model", "kv_dtype", "max_num_seqs")):
        print(f"Design: {design!r} is not allowed; allowed: a dict with model, kv_dtype and max_num_seqs")
        return False
    try:
        plan = plan_capacity(
            design["model"],
            seq_len,
            kv_dtype=design["kv_dtype"],
            weight_dtype=design.get("weight_dtype", "bf16"),
            gpu=gpu,
            gpu_memory_utilization=gpu_memory_utilization,
        )
    except BadInput as exc:
        print(f"Design: {exc}")
        return False
    fits = (
        plan.max_concurrency_low >= users
    )  # at the high end of the overhead's estimate: a design must not hang on the central value
    admits = int(design["max_num_seqs"]) >= users
    verdict = "works" if fits and admits else "does not work"
    why = [
        f"the KV pool holds {plan.max_concurrency:,.1f} sequences of {seq_len:,} tokens at the central overhead "
        f"estimate, {plan.max_concurrency_low:,.1f} at its high end"
    ]
    if not admits:
        why.append(f"max_num_seqs {design['max_num_seqs']} admits fewer than {users} at once")
    if plan.problem:
        why.append(plan.problem)
    print(f"Design: {plan.model}, {plan.kv_dtype} KV on {plan.gpu}: {verdict} for {task}: " + "; ".join(why) + ".")
    return fits and admits


def _capacity_designs(users: int, seq_len: int, gpu: str, gpu_memory_utilization: float) -> list[str]:
    """Catalogue models and KV dtypes whose pool holds `users` sequences, largest model first (bf16 KV before fp8)."""
    from .models import catalogue

    found = []
    for entry in catalogue().values():
        for kv_dtype in ("bf16", "fp8"):
            plan = plan_capacity(
                entry["name"], seq_len, kv_dtype=kv_dtype, gpu=gpu, gpu_memory_utilization=gpu_memory_utilization
            )
            if plan.max_concurrency_low >= users:
                found.append((-(entry.get("params") or 0), kv_dtype != "bf16", entry["name"], kv_dtype, plan.max_concurrency_low))
                break
    return [
        f"{name} with {kv} KV ({conc:,.1f} sequences at the overhead's high end), max_num_seqs >= {users}"
        for *_, name, kv, conc in sorted(found)
    ]


def check_client_design(design: dict | str | None, *, hint: str = "") -> bool | None:
    """Lab 05's design task: a client configuration {"base_url", "api_key_env", "model"} that the doctor passes
    (no check fails or warns). The key itself is named by its environment variable, never written in the design."""
    keys = ("base_url", "api_key_env", "model")
    if design is None:
        print(f"Design: not answered yet: set design = {{'base_url': ..., 'api_key_env': ..., 'model': ...}}. {hint}")
        return None
    if asked_to_show(design):
        print(
            "Design: the base URL ends in /v1 (the SDK appends /chat/completions), the key is the variable the server "
            "was started with, the model is the id /v1/models lists."
        )
        return False
    if not isinstance(design, dict) or any(k not in design for k in keys):
        print(f"Design: {design!r} is not allowed; allowed: a dict with {', '.join(keys)}")
        return False
    from .doctor.checks import run_doctor
    from .endpoints import Endpoint

    try:
        report = run_doctor(Endpoint("design", str(design["base_url"]), design["model"], design["api_key_env"]))
    except BadInput as exc:
        print(f"Design: {exc}")
        return False
    # a warning counts: llama.cpp answers for a model name it does not list, vLLM and TaoToken would not
    flagged = [c for c in report.checks if c.status in ("fail", "warn")]
    if not flagged:
        print(f"Design: correct: every one of the doctor's {len(report.checks)} checks passes.")
        return True
    first = flagged[0]
    verb = "fails" if first.status == "fail" else "warns"
    print(f"Design: the doctor's check '{first.name}' {verb}: {first.cause} {hint}".rstrip())
    return False
