"""Secrets typed on the command line stay out of every file Hydra writes (.hydra/*.yaml, multirun.yaml, the job's
log): real jobs/generate.py processes that end before any engine starts."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from conftest import compose_job, run_generate
from specbatch.common.atomic_files import atomic_write_json, atomic_write_text
from specbatch.config.hydra_secrets import mask_file
from specbatch.engine.spec_metrics import Counters
from specbatch.run.folder import RunFolder
from specbatch.run.summary import RowTotals, summarize

PASSWORD = "s3cret-Pw-4711"
TOKEN = "tok-Abc-123456789"
# The token as a user's shell would paste it into an override from a credential variable.
ENV = {"SPECBATCH_TEST_API_TOKEN": TOKEN}
URI = f"http://user:{PASSWORD}@127.0.0.1:5999"


def files_with_secrets(folder: Path) -> list[str]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files, f"nothing written under {folder}"
    return [str(p) for p in files if PASSWORD.encode() in p.read_bytes() or TOKEN.encode() in p.read_bytes()]


def test_a_single_run_leaves_no_secret_in_hydra_files_or_its_log(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    result = run_generate(
        [
            f"output_root={out}",
            "tracking=server",
            f"tracking.uri={URI}",
            "dataset=local",
            f"dataset.path={tmp_path}/missing-{TOKEN}.jsonl",  # does not exist: exit 2 before any model loads
            "dataset.template='{q}'",
        ],
        timeout=120,
        env=ENV,
    )
    assert result.returncode == 2, (result.stdout + result.stderr)[-2000:]
    assert "matches no file" in result.stdout + result.stderr
    [hydra_dir] = (out / "_hydra").glob("*/*/.hydra")
    assert sorted(p.name for p in hydra_dir.iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert files_with_secrets(out) == []
    assert PASSWORD not in result.stdout + result.stderr and TOKEN not in result.stdout + result.stderr
    # Masked, not emptied: the files still read as the config that ran.
    config = OmegaConf.load(hydra_dir / "config.yaml")
    assert config.tracking.uri == "http://user:***@127.0.0.1:5999"
    assert config.dataset.path == f"{tmp_path}/missing-***.jsonl" and config.dataset.template == "{q}"
    assert f"tracking.uri={config.tracking.uri}" in OmegaConf.load(hydra_dir / "overrides.yaml")
    assert OmegaConf.load(hydra_dir / "hydra.yaml").hydra.job.name == "generate"
    assert "matches no file" in (hydra_dir.parent / "generate.log").read_text()


def finish_run(overrides: list[str]) -> None:
    """Leave the run folder of these overrides finished (summary + done marker): its job then exits at once."""
    layout = RunFolder.for_job(compose_job(overrides))
    summary = summarize(
        Counters(prompt_tokens=4, generation_tokens=4),
        method="ngram",
        k=3,
        totals=RowTotals(rows=1),
        generation_seconds=1.0,
        engine_startup_seconds=0.0,
        warmup_seconds=0.0,
    )
    atomic_write_json(layout.stats_path, summary.to_dict())
    atomic_write_text(layout.done_marker, "done\n")


def test_every_job_of_a_sweep_and_its_multirun_yaml_are_masked(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    common = [f"output_root={out}", "tracking=off", f"tracking.uri={URI}", f"tracking.experiment=team-{TOKEN}"]
    for max_samples in (1, 2):
        finish_run([*common, f"max_samples={max_samples}"])
    result = run_generate(["-m", *common, "max_samples=1,2"], timeout=120, env=ENV)
    assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]
    assert (result.stdout + result.stderr).count("already complete") == 2
    [sweep_dir] = (out / "_hydra" / "multirun").glob("*/*")
    assert sorted(p.name for p in sweep_dir.glob("*/.hydra")) == [".hydra", ".hydra"]
    assert {p.parent.parent.name for p in sweep_dir.glob("*/.hydra/overrides.yaml")} == {"0", "1"}
    assert files_with_secrets(out / "_hydra") == []
    # Hydra's own console line per job ("#0 : ... tracking.uri=http\://user\:...") is masked too.
    assert PASSWORD not in result.stdout + result.stderr and TOKEN not in result.stdout + result.stderr
    multirun = OmegaConf.load(sweep_dir / "multirun.yaml")
    assert multirun.tracking.uri == "http://user:***@127.0.0.1:5999" and multirun.tracking.experiment == "team-***"


def test_a_secret_that_is_a_whole_value_leaves_valid_yaml(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECBATCH_TEST_API_TOKEN", TOKEN)
    path = tmp_path / "config.yaml"
    path.write_text(f"tracking:\n  uri: {URI}\n  experiment: {TOKEN}\nkeep: ${{oc.env:HOME}}\n")
    assert mask_file(path) is True
    masked = OmegaConf.load(path)
    assert masked.tracking.experiment == "***" and masked.tracking.uri == "http://user:***@127.0.0.1:5999"
    assert OmegaConf.to_container(masked)["keep"] == "${oc.env:HOME}"  # interpolations stay as written
    assert mask_file(path) is False  # nothing left to mask: the file is not rewritten
