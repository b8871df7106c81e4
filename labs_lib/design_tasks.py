"""The labs' design tasks: the participant proposes a configuration, the library judges it against the lab's own
numbers (the planner, or what the run measured) and says why. Like notebook.check_exercise, a hint comes first
and the best answer only when asked ("show")."""

from __future__ import annotations

import json
from functools import cache

import pandas as pd

from .catalogs import gpu_names, gpu_spec
from .errors import BadInput, positive_int
from .kv_math import dtype, plan_capacity
from .notebook import SHOW, asked_to_show
from .paths import DATA_DIR


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


def _unanswered(design: object, label: str, keys: tuple[str, ...], shown: str, hint: str) -> bool | None:
    """The verdict on a design that is not a proposal yet: None (not answered), False ("show": `shown` printed; or a
    value that is not a dict with `keys`); True for a proposal, which the caller judges."""
    if design is None:
        print(f"Design{label}: not answered yet: set design = {{{', '.join(repr(k) + ': ...' for k in keys)}}}. {hint}")
        return None
    if asked_to_show(design):
        print(f"Design{label}: {shown}.")
        return False
    if not isinstance(design, dict) or any(k not in design for k in keys):
        print(f"Design{label}: {design!r} is not allowed; allowed: a dict with {', '.join(keys)}")
        return False
    return True


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
    rows_are: str = "measured",
) -> bool | None:
    """Judge a choice among measured rows (`design` names a row by `keys`): does it stay under the limit, and is it
    the best row that does? Prints one verdict; returns True/False, None when not answered.

    `also` adds limits every row must meet by its measured value ({column: maximum}, e.g. a TPOT SLO beside a KL
    budget): rows over any of them are out before the best is chosen.

    With `limit_column_low` (the low end of limit_column's confidence interval) the measurement cannot always say
    whether a row meets the limit: the best row by the measured value and the best row whose interval reaches
    under the limit are both accepted, the second with a note that more data would decide.

    `rows_are` says what the rows are in the verdict ("measured"; "planned" for rows computed from measurements,
    such as pairs of settings no run combined)."""

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
    best_text = " or ".join(dict.fromkeys(n for n in (named(best), named(maybe)) if n)) or f"no {rows_are} row meets it"
    if (proposal := _unanswered(design, label, keys, f"the best {rows_are} choice is {best_text}", hint)) is not True:
        return proposal
    assert isinstance(design, dict)  # _unanswered let only a dict with the keys through
    rows = table
    for k in keys:
        rows = rows[rows[k].astype(str) == str(design[k])]
    if rows.empty:
        print(f"Design{label}: no {rows_are} row has {design}; choose among the {rows_are} rows ({name}).")
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
        f"Design{label}: {design} meets the limit, but another {rows_are} row has a {better} {objective} "
        f'than its {row[objective]:,.2f}. {hint} (answer "{SHOW}" to see it)'
    )
    return False


RERUN_TOLERANCE = 0.15  # a re-run's throughput within this share of the best measured counts as as good (run-to-run noise)


def check_measured_design(
    design: dict | str | None,
    measured: pd.DataFrame | None,
    table: pd.DataFrame,
    *,
    key: str,
    limit_column: str,
    limit: float,
    objective: str,
    hint: str = "",
) -> bool | None:
    """Judge a design that is run, not looked up: `design` names a setting ({key: value}, any value, measured or
    not), `measured` is the run of that setting (one row of the same columns as `table`, or None before it ran),
    and `table` holds what the lab measured before. Correct when the run meets `limit_column` < `limit` and its
    `objective` (higher is better) is within RERUN_TOLERANCE of the best measured row that meets it. Prints one
    verdict; returns True/False, None when not answered."""
    best = best_row(table, limit_column=limit_column, limit=limit, objective=objective)
    # the key read from its own column: a row of mixed columns holds numbers as floats (4.0 users)
    best_text = (
        "no measured level meets it"
        if best is None
        else f"{key}={table.loc[best.name, key]} ({best[objective]:,.2f} {objective})"
    )
    shown = f"the best measured setting is {best_text}; a setting between the measured ones may do better"
    if (proposal := _unanswered(design, "", (key,), shown, f"Your setting is run. {hint}")) is not True:
        return proposal
    if measured is None or measured.empty:
        print(f"Design: {design} was not run: run this cell again with it.")
        return False
    row = measured.iloc[0]
    if not row[limit_column] < limit:
        print(f"Design: {design} measured {limit_column} {row[limit_column]:,.4g}, over the limit {limit:,.4g}. {hint}")
        return False
    if best is None or row[objective] >= (1 - RERUN_TOLERANCE) * best[objective]:
        print(
            f"Design: correct: {design} measured {limit_column} {row[limit_column]:,.4g} < {limit:,.4g} and "
            f"{row[objective]:,.2f} {objective}; the best measured before: {best_text}."
        )
        return True
    print(
        f"Design: {design} meets the limit, but its {row[objective]:,.2f} {objective} is more than "
        f'{RERUN_TOLERANCE:.0%} below a measured setting\'s. {hint} (answer "{SHOW}" to see it)'
    )
    return False


VLLM_KV_DTYPES = ("bf16", "fp8")  # the design task's choice: the model's own 16 bits (--kv-cache-dtype auto) or fp8


@cache
def _kv_quality() -> dict:
    return json.loads((DATA_DIR / "kv_quality.json").read_text())


def kv_dtype_costs() -> pd.DataFrame:
    """What each KV cache dtype costs in quality, measured: KL divergence from the same engine's 16-bit cache
    (nats/token) with its 95% interval, by engine and dtype (data/kv_quality.json: lab 05's quick runs on the labs'
    Gemma 3 270M, with their provenance). The 16-bit caches cost nothing by definition: they are the reference."""
    data = _kv_quality()
    rows = [{**row, "kl": 0.0, "kl_ci_low": 0.0, "kl_ci_high": 0.0} for row in data["references"]] + data["rows"]
    return pd.DataFrame(rows).set_index(["engine", "kv_dtype"]).sort_index()


def capacity_designs(
    model: str, *, users: int, seq_len: int, gpu_memory_utilization: float, max_num_seqs: int | None = None
) -> pd.DataFrame:
    """Every catalogue card x vLLM KV dtype for `model` serving `users` sequences of `seq_len` tokens: the card's
    memory (GiB), the sequences its KV pool holds at the overhead's high end (planner), and the dtype's measured KL
    on vLLM (kv_dtype_costs). `works` when the pool holds `users`."""
    costs = kv_dtype_costs().loc["vllm"]
    rows = []
    for gpu in gpu_names():
        for kv_dtype in VLLM_KV_DTYPES:
            plan = plan_capacity(
                model,
                seq_len,
                kv_dtype=kv_dtype,
                gpu=gpu,
                gpu_memory_utilization=gpu_memory_utilization,
                max_num_seqs=max_num_seqs or users,
            )
            cost = costs.loc[kv_dtype]
            rows.append(
                {
                    "gpu": gpu,
                    "kv_dtype": kv_dtype,
                    "card_memory_gib": gpu_spec(gpu)["memory_gib"],
                    "max_concurrency": plan.max_concurrency,
                    "max_concurrency_low": plan.max_concurrency_low,
                    "problem": plan.problem,
                    "kl": cost["kl"],
                    "kl_ci_low": cost["kl_ci_low"],
                    "works": plan.max_concurrency_low >= users,
                }
            )
    return pd.DataFrame(rows)


def best_capacity_design(table: pd.DataFrame, kl_budget: float) -> pd.Series | None:
    """The design with the least card memory that works and whose KV dtype's KL stays under `kl_budget` (or whose
    interval reaches under it); among equals, the 16-bit cache first."""
    ok = table[table.works & (table.kl_ci_low < kl_budget)]
    return None if ok.empty else ok.sort_values(["card_memory_gib", "kl"]).iloc[0]


def check_capacity_design(
    design: dict | str | None,
    *,
    model: str = "qwen2.5-7b",
    users: int = 50,
    seq_len: int = 8192,
    gpu_memory_utilization: float = 0.9,
    kl_budget: float = 0.01,
) -> bool | None:
    """Lab 01's design task: serve `users` concurrent sequences of `seq_len` tokens of `model` on the card with the
    least memory (no prices are sourced: memory stands in for cost), with a KV cache whose measured quality cost
    stays under `kl_budget` nats/token. `design` is {"gpu", "kv_dtype", "max_num_seqs"}; it works when the planner's
    KV pool holds `users` sequences at the high end of its overhead estimate and max_num_seqs admits them."""
    task = (
        f"{users} users of {model} at {seq_len:,} tokens, KV quality within {kl_budget:g} nats/token "
        f"(gpu_memory_utilization {gpu_memory_utilization})"
    )
    keys = ("gpu", "kv_dtype", "max_num_seqs")
    if design is None:
        print(
            f"Design: not answered yet: {task}. Set design = {{'gpu': ..., 'kv_dtype': ..., 'max_num_seqs': ...}}. "
            "Hint: the pool is what the weights leave (section 6); fp8 halves the cache and costs the KL in kv_dtype_costs()."
        )
        return None
    table = capacity_designs(model, users=users, seq_len=seq_len, gpu_memory_utilization=gpu_memory_utilization)
    best = best_capacity_design(table, kl_budget)
    best_text = "none in the catalogue" if best is None else f"{best.gpu} with a {best.kv_dtype} KV cache"
    if asked_to_show(design):
        print(f"Design: {task}: the least card memory that does it: {best_text}, max_num_seqs >= {users}.")
        return False
    if not isinstance(design, dict) or any(k not in design for k in keys):
        print(f"Design: {design!r} is not allowed; allowed: a dict with {', '.join(keys)}")
        return False
    try:
        gpu, kv_dtype = gpu_spec(design["gpu"])["name"], dtype(design["kv_dtype"]).name
        if kv_dtype not in VLLM_KV_DTYPES:
            raise BadInput("kv_dtype", design["kv_dtype"], "vLLM caches K and V as: " + ", ".join(VLLM_KV_DTYPES))
        max_num_seqs = positive_int("max_num_seqs", design["max_num_seqs"])
    except BadInput as exc:
        print(f"Design: {exc}")
        return False
    # the design's own max_num_seqs sizes the profile run's sampler peak, so its pool is planned with it
    ours = capacity_designs(
        model, users=users, seq_len=seq_len, gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs
    )
    row = ours[(ours.gpu == gpu) & (ours.kv_dtype == kv_dtype)].iloc[0]
    why = [
        f"the KV pool holds {row.max_concurrency:,.1f} sequences at the central overhead estimate, "
        f"{row.max_concurrency_low:,.1f} at its high end"
    ]
    admits, good = max_num_seqs >= users, row.kl_ci_low < kl_budget
    if not admits:
        why.append(f"max_num_seqs {max_num_seqs} admits fewer than {users} at once")
    if not good:
        why.append(f"the {kv_dtype} cache costs {row.kl:.4f} nats/token of KL (measured), over the budget")
    if isinstance(row.problem, str):  # the planner's reason a card cannot serve the model at all (else None)
        why.append(row.problem)
    label = f"Design: {model}, {kv_dtype} KV on {gpu}"
    if not (row.works and admits and good):
        print(f"{label}: does not work for {task}: " + "; ".join(why) + ".")
        return False
    if best is not None and gpu_spec(gpu)["memory_gib"] > best.card_memory_gib:
        print(
            f"{label}: works ({why[0]}), but a card with less memory does it too: least memory, not only enough, is "
            f'the task (answer "{SHOW}" to see it).'
        )
        return False
    print(f"{label}: correct: the least card memory ({gpu_spec(gpu)['memory_gib']:g} GiB) for {task}; {why[0]}.")
    return True


SERVICE_SEQUENCES, SERVICE_CONTEXT_TOKENS = 16, 4096  # lab 05's serving plan: 16 users, 4,096 tokens each


def quantization_design(design: dict | str | None, results: pd.DataFrame, reference: str, weight_variants: bool) -> bool | None:
    """Lab 05's design task, judged on its run (`results`: compare_variants' or compare_models' rows, the reference
    first). On llama.cpp (`weight_variants`): the weights variant and KV dtype, any pair, that serves
    SERVICE_SEQUENCES x SERVICE_CONTEXT_TOKENS in what the F16 weights file alone takes, within the TPOT SLO (the
    reference's + 10%), at the least estimated KL (quant_compare.serving_plans). On vLLM, whose KV pool is a size
    it is given: the measured configuration with the least memory within KL 0.01 and the same SLO."""
    from .quant_compare import config_labels, config_memory_mib, serving_plans

    if len(results) < 2:  # a configuration that failed to start is no row to choose
        print("design task not set: fewer than two configurations started")
        return None
    tpot_slo_ms = 1.10 * results.iloc[0]["tpot_p50_ms"]
    if weight_variants and "F16" in set(results.variant):
        budget_mib = float(results[results.variant == "F16"].file_MiB.iloc[0])
        print(
            f"the service: {SERVICE_SEQUENCES} x {SERVICE_CONTEXT_TOKENS:,} tokens in {budget_mib:.1f} MiB, "
            f"TPOT p50 at most {tpot_slo_ms:.1f} ms"
        )
        return check_choice(
            "",
            design,
            serving_plans(results, reference, SERVICE_SEQUENCES, SERVICE_CONTEXT_TOKENS),  # sized and estimated, not shown
            keys=("weights", "kv_dtype"),
            limit_column="memory_MiB",
            limit=budget_mib,
            also={"est_tpot_ms": tpot_slo_ms},
            objective="est_kl",
            higher_is_better=False,
            rows_are="planned",
            hint=f"weights file + llamacpp_layout(model, {SERVICE_SEQUENCES} x {SERVICE_CONTEXT_TOKENS}, {SERVICE_SEQUENCES}, "
            "type_k=kv_dtype).kv_bytes within the budget, then the least weights KL + KV KL",
        )
    choices = results.assign(configuration=list(config_labels(results)), memory_MiB=config_memory_mib(results)).iloc[1:]
    return check_choice(
        "",
        design,
        choices,
        keys=("configuration",),
        limit_column="kl",
        limit_column_low="kl_ci_low",
        limit=0.01,
        also={"tpot_p50_ms": tpot_slo_ms},  # the SLO: a configuration over it is out, however small
        objective="memory_MiB",
        higher_is_better=False,
        hint=f"KL under 0.01 (or its interval reaching below it), TPOT p50 at most {tpot_slo_ms:.1f} ms, then the least memory",
    )
