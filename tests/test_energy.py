"""Energy counters (labs_lib/energy.py): RAPL's files as the Linux powercap driver lays them out, a wrapped counter,
and what this machine answers. NVML's counter on a GPU: tests/test_gpu_branches.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from labs_lib import energy
from labs_lib.energy import EnergyReading, joules_between, read_energy

POWERCAP = Path("/sys/class/powercap")


def powercap_tree(root: Path, zones: dict[str, tuple[str, int, int]]) -> Path:
    """A powercap folder as the kernel lays it out: one folder per zone holding name, energy_uj, max_energy_range_uj."""
    for zone, (name, energy_uj, range_uj) in zones.items():
        (root / zone).mkdir(parents=True)
        (root / zone / "name").write_text(name + "\n")
        (root / zone / "energy_uj").write_text(f"{energy_uj}\n")
        (root / zone / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return root


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(energy, "read_gpus", lambda: ([], "no GPU: NVML is not available here (test)"))


def test_rapl_packages_are_read_and_their_parts_left_out(tmp_path, no_gpu):
    # intel-rapl:0:0 (the cores) is a part of package 0: counting it too would count those joules twice
    root = powercap_tree(
        tmp_path,
        {
            "intel-rapl:0": ("package-0", 5_000_000, 262_143_328_850),
            "intel-rapl:0:0": ("core", 3_000_000, 262_143_328_850),
            "intel-rapl:1": ("package-1", 7_500_000, 262_143_328_850),
        },
    )
    reading, why = read_energy(root)
    assert why == "" and reading is not None
    assert reading.source == "RAPL package-0, package-1" and reading.joules == (5.0, 7.5)
    assert reading.wrap_joules == (262_143.32885, 262_143.32885)
    (root / "intel-rapl:0" / "energy_uj").write_text("6250000\n")
    (root / "intel-rapl:1" / "energy_uj").write_text("8000000\n")
    after, _ = read_energy(root)
    assert joules_between(reading, after) == pytest.approx(1.75)


def test_a_counter_past_its_range_counts_once_round():
    before = EnergyReading("RAPL package-0", (262_140.0,), (262_143.0,))
    after = EnergyReading("RAPL package-0", (2.0,), (262_143.0,))
    assert joules_between(before, after) == pytest.approx(5.0)
    # NVML's counter does not wrap (64-bit mJ): a smaller value after is a smaller value
    assert joules_between(EnergyReading("NVML, 1 GPU", (10.0,), (None,)), EnergyReading("NVML, 1 GPU", (4.0,), (None,))) == -6.0


def test_rapl_that_cannot_be_read_says_why_in_one_line(tmp_path, no_gpu, monkeypatch):
    assert read_energy(tmp_path) == (
        None,
        f"no GPU: NVML is not available here (test); no RAPL energy counter ({tmp_path} holds no package zone)",
    )
    root = powercap_tree(tmp_path / "pc", {"intel-rapl:0": ("package-0", 1, 10)})
    original = Path.read_text

    def refused(self, *args, **kwargs):
        if self.name == "energy_uj":  # as for a user other than root since Linux 5.10 (root reads every file)
            raise PermissionError(13, "Permission denied", str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refused)
    reading, why = read_energy(root)
    assert reading is None and "may not read it" in why and len(why.splitlines()) == 1


def test_this_machine_answers_with_its_counter_or_why_not():
    reading, why = read_energy()
    if reading is None:
        assert why and len(why.splitlines()) == 1
        if not POWERCAP.exists():
            assert "no RAPL energy counter" in why, why
    else:
        assert reading.source.startswith(("NVML", "RAPL")) and all(j >= 0 for j in reading.joules)


def test_tokens_per_joule_are_the_loads_output_tokens_over_its_joules():
    from labs_lib.sweep_views import energy_note, load_table

    rows = pd.DataFrame(
        {
            "status": ["ok", "ok"],
            "config.parallel": [1, 4],
            "summary.output_throughput": [10.0, 30.0],
            "summary.total_output_tokens": [256, 1024],
            "energy.joules": [128.0, 256.0],
            "energy.source": ["RAPL package-0", "RAPL package-0"],
        }
    )
    assert list(load_table(rows)["tok/J"]) == [2.0, 4.0]
    assert energy_note({"batching": rows, "kv_dtype": None}) == "tokens per joule (tok/J) from RAPL package-0"
    unmeasured = rows.assign(**{"energy.joules": [None, None], "energy.source": ["no GPU; no RAPL", "no GPU; no RAPL"]})
    assert "tok/J" not in load_table(unmeasured)
    assert energy_note({"batching": unmeasured}) == "no tokens per joule: no GPU; no RAPL"
    assert energy_note({}) == "no tokens per joule: no point measured a load"
