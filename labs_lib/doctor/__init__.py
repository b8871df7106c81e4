"""The doctor: what went wrong between a client and an OpenAI-compatible server, and how to fix it.

rules.py          the vocabulary: diagnose(exception | body | error string) -> Diagnosis (code, cause, fix)
report.py         Check and Report: ordered checks with evidence (keys masked), cause and fix
checks.py         run_doctor(endpoint): configuration -> reachability -> service -> auth -> model -> completion -> stream -> limits
client_config.py  check_config(path): OpenAI-SDK, Claude Code and Codex configuration files
troubleshoot.py   attempt(what, call): lab 06's failures caught, kept and diagnosed; the same on vLLM; its tables
"""

from .checks import run_doctor
from .client_config import check_config
from .report import Check, Report
from .rules import RULES, Diagnosis, diagnose
from .troubleshoot import Outcome, attempt

__all__ = ["RULES", "Check", "Diagnosis", "Outcome", "Report", "attempt", "check_config", "diagnose", "run_doctor"]
