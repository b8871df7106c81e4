"""The doctor's report: checks in order, each with a status, its evidence (keys masked), cause and fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..redact import redact
from .rules import RULES

STATUSES = ("ok", "warn", "fail", "skipped")


@dataclass
class Check:
    name: str
    status: str
    evidence: str = ""
    cause: str = ""
    fix: str = ""

    @classmethod
    def from_rule(cls, name: str, status: str, code: str, evidence: str) -> Check:
        cause, fix = RULES[code]
        return cls(name, status, redact(evidence), cause, fix)


@dataclass
class Report:
    endpoint: dict
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    @property
    def first_failure(self) -> Check | None:
        """The first check that failed, in the doctor's order; None when none did."""
        return next((c for c in self.checks if c.status == "fail"), None)

    @property
    def first_failed_step(self) -> int | None:
        """The number (1-8, the doctor's order) of the first check that failed; None when none did."""
        failed = self.first_failure
        return int(failed.name.split()[0]) if failed else None

    def to_dict(self) -> dict:
        return {"endpoint": self.endpoint, "checks": [asdict(c) for c in self.checks], "ok": self.ok}

    def table(self):
        import pandas as pd

        return pd.DataFrame([asdict(c) for c in self.checks])

    def text(self) -> str:
        marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skipped": "skip"}
        lines = [
            f"doctor: {self.endpoint['base_url']} (model {self.endpoint.get('model') or '-'}, key {self.endpoint.get('api_key')})"
        ]
        for c in self.checks:
            lines.append(f"  [{marks[c.status]}] {c.name}: {c.evidence}")
            if c.status in ("warn", "fail"):
                lines.append(f"         cause: {c.cause}")
                lines.append(f"         fix:   {c.fix}")
        lines.append(
            "verdict: "
            + ("nothing failed" if self.ok else "failed: " + ", ".join(c.name for c in self.checks if c.status == "fail"))
        )
        return "\n".join(lines)
