"""`doctor`: diagnose an OpenAI-compatible endpoint (or a client config file) step by step."""

from __future__ import annotations

import json
import os

from .common import add_target_arguments, chosen_target


def run(args) -> int:
    from ..doctor import check_config, run_doctor
    from ..endpoints import Endpoint, resolve
    from ..errors import BadInput, positive_number

    timeout_s = positive_number("--timeout", args.timeout)
    if args.machine:
        from ..doctor.machine import run_machine_checks

        report = run_machine_checks()
    elif args.config:
        report = check_config(args.config)
    else:
        target = chosen_target(args, "exactly one of --endpoint NAME, --base-url URL or --config PATH")
        if target == "local":
            raise BadInput(
                "--endpoint",
                "local",
                "allowed: taotoken, vllm, or --base-url of a running server (start one with `labs serve`)",
            )
        if args.api_key_env and not os.environ.get(args.api_key_env, "").strip():
            endpoint = resolve(target, model=args.model)
            endpoint = Endpoint(
                endpoint.name, endpoint.base_url, endpoint.model, args.api_key_env
            )  # the doctor reports it, not refuses
        else:
            endpoint = resolve(target, model=args.model, api_key_env=args.api_key_env)
        report = run_doctor(endpoint, timeout_s=timeout_s)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    return 0 if report.ok else 1


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="diagnose an OpenAI-compatible endpoint (or a client config file) step by step")
    add_target_arguments(p, endpoint_help="taotoken or vllm", model_help="the model id you send")
    p.add_argument(
        "--config",
        help="check a client config file instead (OpenAI-SDK JSON/TOML, Claude Code settings.json, Codex config.toml/auth.json)",
    )
    p.add_argument(
        "--machine", action="store_true", help="check this GPU instance instead: the driver against vLLM's CUDA, the card"
    )
    p.add_argument("--timeout", default=15, help="seconds per request, > 0 (default 15)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
