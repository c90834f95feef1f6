"""The engine interface: one registry for engine.backend, vLLM confined to its backend, the dummy's invariants."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT, compose_job
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.config import ConfigError, backend_names
from specbatch.engine import Engine, Request, backend_class, start_engine

SRC = PROJECT_ROOT / "src" / "specbatch"
# The only module that may import vLLM: its backend (preflight finds installed packages without importing them).
# The vLLM backend; and the prediction's replay, which calls vLLM's own n-gram matcher (no engine), so that a vLLM
# upgrade that changes the matching changes the prediction too.
# And the corrections to vLLM's CPU build, which vLLM itself loads (a plugin) and the backend calls.
MAY_IMPORT_VLLM = {
    SRC / "backends" / "vllm" / "vllm_offline.py",
    SRC / "backends" / "vllm" / "vllm_cpu_fixes.py",
    # The backend's per-step stat logger builds vLLM's own stats objects for the step timing's bench.
    SRC / "backends" / "vllm" / "step_stats.py",
    # The backend's temp-file owner moves the rendezvous file vLLM's in-process executor names into its own folder.
    SRC / "backends" / "vllm" / "vllm_temp_files.py",
    SRC / "prediction" / "replay.py",
    # The drafter's capture on a GPU starts vLLM itself with extract_hidden_states (not the job's engine).
    SRC / "drafter" / "capture_vllm.py",
}


def imports_vllm(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "vllm" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "vllm":
            return True
    return False


def test_no_module_outside_the_vllm_backend_imports_vllm() -> None:
    offenders = [p.relative_to(SRC) for p in SRC.rglob("*.py") if p not in MAY_IMPORT_VLLM and imports_vllm(p)]
    assert offenders == []
    assert imports_vllm(SRC / "backends" / "vllm" / "vllm_offline.py")  # the check itself sees an import


def test_a_dummy_job_never_loads_vllm(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"q": "one"}\n{"q": "two"}\n')
    script = f"""
import sys
from hydra import compose, initialize_config_dir
from specbatch.config import register_configs, to_job_config
from specbatch.pipeline import run_job
register_configs()
with initialize_config_dir(config_dir={str(PROJECT_ROOT / "conf")!r}, version_base="1.3"):
    cfg = compose("config", overrides=["engine.backend=dummy", "spec=ngram", "tracking=off", "dataset=local",
        "dataset.path={data}", "dataset.template='{{q}}'", "output_root={tmp_path / "out"}"])
result = run_job(to_job_config(cfg))
assert result.summary.rows == 2 and result.summary.drafts > 0, result.summary
print(sorted(m for m in sys.modules if m == "vllm" or m.startswith("vllm.")))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_each_backend_in_the_one_table_is_its_own_engine_class() -> None:
    for name in backend_names():
        backend = backend_class(name)
        assert issubclass(backend, Engine) and backend.name == name
        assert not getattr(backend.start, "__isabstractmethod__", False), name
    with pytest.raises(ConfigError, match="engine.backend=vlm is not an engine: use one of vllm, server, llama_cpp"):
        backend_class("vlm")


def test_an_unknown_backend_is_refused_naming_the_key() -> None:
    with pytest.raises(
        ConfigError, match=r"engine.backend=vlm is not an engine: use one of vllm, server, llama_cpp, dummy"
    ):
        compose_job(["engine.backend=vlm"])


def test_the_dummy_obeys_vllm_invariants_and_is_deterministic() -> None:
    job = compose_job(["engine.backend=dummy", "spec=ngram", "sampling.max_tokens=50", "engine.max_num_seqs=3"])
    runs = []
    for _ in range(2):
        engine = start_engine(job)
        assert isinstance(engine, DummyEngine) and engine.concurrency == 3
        before = engine.counters()
        for i in range(10):
            engine.add(Request(f"r{i}", 1, [i, i + 1, i + 2], job.sampling))
        done = []
        while engine.unfinished:
            step = engine.step()
            done += step
        runs.append({c.request.row_id: c.samples[0] for c in done})
        # Finished in the order their lengths made them finish, not the order they came in.
        assert [c.request.row_id for c in done] != [f"r{i}" for i in range(10)]
        spent = engine.counters() - before
        samples = list(runs[-1].values())
        assert spent.generation_tokens == sum(len(s.token_ids) for s in samples)
        assert spent.drafts == sum(s.spec.spec_steps for s in samples)
        assert spent.accepted_tokens == sum(s.spec.accepted_tokens for s in samples)
        for s in samples:
            figures = s.spec
            assert 0 <= figures.accepted_tokens <= figures.draft_tokens == 3 * figures.spec_steps
            assert figures.acceptance_length == pytest.approx(1 + figures.accepted_tokens / figures.spec_steps)
            assert sum(figures.acceptance_histogram) == figures.spec_steps
            assert len(s.token_ids) == figures.spec_steps + figures.accepted_tokens <= 50
    assert runs[0] == runs[1]


class FailingWarmUp(DummyEngine):
    """A backend whose warm-up request fails (e.g. a server that refuses it)."""

    closed = 0

    def warmup(self) -> None:
        raise RuntimeError("warm-up refused")

    def close(self) -> None:
        self.closed += 1


def test_a_failed_warm_up_closes_the_engine_before_it_propagates() -> None:
    engine = FailingWarmUp("fingerprint")
    with pytest.raises(RuntimeError, match="warm-up refused"):
        engine.warm_up()
    # Nothing the failed start made is left behind: its processes or connection were closed once.
    assert engine.closed == 1
    # A backend without one-off costs warms up as a no-op, and stays open.
    plain = DummyEngine("fingerprint")
    plain.warm_up()
    assert plain.unfinished == 0
