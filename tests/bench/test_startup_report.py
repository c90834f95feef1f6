"""jobs/bench.py --startup's report (specbatch.bench.startup), its launches replaced: the machine line first, then
the medians per checkout and the ratio to the first."""

from __future__ import annotations

from pathlib import Path

from specbatch.bench import machine_header, startup


def test_the_report_starts_with_the_machine_and_gives_medians_against_the_first(monkeypatch, tmp_path: Path) -> None:
    walls = {"before": iter([(20.0, 8.0), (19.0, 8.0), (21.0, 8.0)]), "after": iter([(18.0, 5.0)] * 3)}
    monkeypatch.setattr(startup, "_one_launch", lambda checkout, out: next(walls[checkout.name]))
    report = startup.startup_bench([tmp_path / "before", tmp_path / "after"], 3, tmp_path, "stamp").splitlines()
    assert report[0] == machine_header()
    [before] = [line for line in report if line.startswith(str(tmp_path / "before"))]
    [after] = [line for line in report if line.startswith(str(tmp_path / "after"))]
    assert before.split()[1:] == ["20.0", "8.0", "12.0", "1.000"]
    assert after.split()[1:] == ["18.0", "5.0", "13.0", "0.900"]
