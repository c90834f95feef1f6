"""start_engine's ``starting`` callback: after the backend's imports, before its build (so the work it starts in
another thread overlaps the build, not an import holding the interpreter lock)."""

from __future__ import annotations

from specbatch.engine import start_engine
from specbatch.engine.dummy import DummyEngine


def test_starting_comes_after_the_imports_and_before_the_build(job_factory, monkeypatch) -> None:
    events: list[str] = []
    build = DummyEngine.start.__func__

    def start(cls, job):
        events.append("build")
        return build(cls, job)

    monkeypatch.setattr(DummyEngine, "load", classmethod(lambda cls: events.append("imports")))
    monkeypatch.setattr(DummyEngine, "start", classmethod(start))
    engine = start_engine(job_factory("engine.backend=dummy"), lambda: events.append("starting"))
    assert isinstance(engine, DummyEngine)
    assert events == ["imports", "starting", "build"]
