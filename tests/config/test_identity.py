"""The run folder's digest, the engine's fingerprint and the comparison's workload come from what each config field
declares, and give exactly the values of the three rules they replaced (so no run folder and no comparison moves)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from typing import Any

import pytest

from conftest import PROJECT_ROOT, compose_job
from specbatch.config import (
    ConfigError,
    Identity,
    JobConfig,
    engine_identity,
    identity_fields,
    run_folder_config,
    run_folder_digest,
    to_plain_dict,
    workload_config,
    workload_digest,
)
from specbatch.config.declarations import IDENTITY
from specbatch.config.identity import field_identities, project

# The three rules as they were written before the fields declared their identities (kept here as the reference).
OLD_HASHED_KEYS = ("model", "spec", "dataset", "sampling", "engine", "max_samples", "chunk_size")
OLD_ENGINE_KEYS = ("model", "spec", "engine")
OLD_NOT_WORKLOAD = ("spec", "tracking", "output_root", "run_name", "shard", "repeat", "chunk_size")
# How long a stop may take and how progress is shown were added later and are in no identity (the old rules predate
# them).
OLD_NOT_WORKLOAD += ("stop_grace_seconds", "progress")
# Where the engines run (launcher=ray, issue 55) too.
OLD_NOT_WORKLOAD += ("ray",)
# Engine keys the server backend added later; only its jobs count them (the old rules predate them).
SERVER_KEYS = ("url", "api_key_env", "served_model", "api", "max_concurrency", "request_timeout_seconds", "retries")
# And the llama_cpp backend's, and the dummy's engine.step_seconds (issue 55: absent while null).
LLAMA_CPP_KEYS = ("llama_server", "step_seconds")
# And the vllm backend's engine.multiprocessing: absent while null, in the folder and engine digests when set.
VLLM_KEYS = ("multiprocessing",)


def plain_before_server_keys(job: JobConfig) -> dict[str, Any]:
    plain = to_plain_dict(job)
    assert job.engine.backend != "server", "the old rules knew no server backend"
    plain["engine"] = {k: v for k, v in plain["engine"].items() if k not in SERVER_KEYS + LLAMA_CPP_KEYS}
    # spec.k_schedule, model.gguf and spec.draft_gguf came later too; while null they are in no digest.
    assert plain["spec"].pop("k_schedule") is None, "the old rules knew no k schedule"
    assert plain["model"].pop("gguf") is None and plain["spec"].pop("draft_gguf") is None, "nor GGUF files"
    assert plain["spec"].pop("auto") is None, "nor spec=auto's knobs"
    assert plain["spec"].pop("dspark_draft_topk") is None, "nor DSpark's top-k"
    assert plain["dataset"].pop("placeholder_prefix") is None, "nor placeholder rows (SPEED-Bench)"
    # Nor vLLM's verification modes (issue 54): absent while null.
    assert plain["spec"].pop("rejection_sample_method") is None, "nor block verification"
    assert plain["spec"].pop("use_heterogeneous_vocab") is None, "nor drafts with another tokenizer"
    # Nor spec=simulate's acceptance profile, nor equal lengths (issue 54): absent while null.
    for knob in ("synthetic_acceptance_rates", "profile", "draft_coverage"):
        assert plain["spec"].pop(knob) is None, f"nor spec.{knob}"
    assert plain["sampling"].pop("ignore_eos") is None, "nor sampling.ignore_eos"
    # spec.parallel_drafting too: absent while null, counted like any knob when set (the PARD preset sets it).
    if plain["spec"]["parallel_drafting"] is None:
        del plain["spec"]["parallel_drafting"]
    if plain["engine"]["multiprocessing"] is None:
        del plain["engine"]["multiprocessing"]
    return plain


def old_run_folder_hash(job: JobConfig) -> str:
    plain = plain_before_server_keys(job)
    relevant = {key: plain[key] for key in OLD_HASHED_KEYS}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:8]


def old_engine_fingerprint(job: JobConfig) -> str:
    plain = plain_before_server_keys(job)
    return hashlib.sha256(json.dumps({k: plain[k] for k in OLD_ENGINE_KEYS}, sort_keys=True).encode()).hexdigest()


def old_workload(config: dict[str, Any]) -> str:
    plain = {k: v for k, v in config.items() if k not in OLD_NOT_WORKLOAD}
    plain["engine"] = {
        k: v
        for k, v in plain["engine"].items()
        if k != "max_num_seqs" and k not in SERVER_KEYS + LLAMA_CPP_KEYS + VLLM_KEYS
    }
    if plain["model"].get("gguf") is None:
        plain["model"].pop("gguf", None)
    # dataset.placeholder_prefix (SPEED-Bench) came later too: absent while null.
    if plain["dataset"].get("placeholder_prefix") is None:
        plain["dataset"].pop("placeholder_prefix", None)
    # sampling.ignore_eos (issue 54) too.
    if plain["sampling"].get("ignore_eos") is None:
        plain["sampling"].pop("ignore_eos", None)
    plain["engine"].setdefault("backend", "vllm")
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:8]


SETUPS = [
    [],
    ["spec=none"],
    ["spec=suffix", "spec.suffix_decoding_max_tree_depth=16"],
    ["model=tiny_llama", "spec=eagle3", "spec.draft_sample_method=probabilistic"],
    ["model=tiny_mimo", "spec=mtp"],
    ["model=llama31_8b_instruct", "spec=draft_model", "engine=gpu"],
    ["tracking=off", "output_root=/elsewhere", "run_name=mine", "repeat=2", "shard.index=1", "shard.count=3"],
    ["max_samples=3", "chunk_size=7", "engine.max_num_seqs=4", "engine.backend=dummy"],
    ["dataset=mt_bench", "sampling=sampled", "sampling.n=4", "spec=none", "model.dtype=float32"],
    ["engine.multiprocessing=true"],
]


@pytest.fixture(scope="module")
def jobs() -> list[JobConfig]:
    return [compose_job(overrides) for overrides in SETUPS]


def test_the_three_identities_equal_the_rules_they_replaced(jobs: list[JobConfig]) -> None:
    for job in jobs:
        assert run_folder_digest(job) == old_run_folder_hash(job)
        assert engine_identity(job) == old_engine_fingerprint(job)
        assert workload_digest(to_plain_dict(job)) == old_workload(to_plain_dict(job))
    # Where results go, the shard and the repeat share the default's folder; every other set-up has its own.
    assert run_folder_digest(jobs[6]) == run_folder_digest(jobs[0])
    assert len({run_folder_digest(job) for job in jobs}) == len(jobs) - 1


def test_old_runs_configs_give_the_workload_they_had(jobs: list[JobConfig]) -> None:
    for job in jobs:
        plain = to_plain_dict(job)
        # Written before engine.backend existed: it ran on vLLM and compares with vLLM runs written since.
        legacy = copy.deepcopy(plain)
        del legacy["engine"]["backend"]
        assert workload_digest(legacy) == old_workload(legacy)
        if plain["engine"]["backend"] == "vllm":
            assert workload_digest(legacy) == workload_digest(plain)
        # Keys this version does not know (at the top or in a section) are kept, as the deny-list kept them.
        foreign = copy.deepcopy(legacy)
        foreign["prompt_cache"] = {"enabled": True}
        foreign["engine"]["block_size"] = 16
        foreign["model"]["quantization"] = "awq"
        foreign["spec"]["something"] = 1
        assert workload_digest(foreign) == old_workload(foreign) != workload_digest(legacy)
        # Without the keys added since (a run from before chunk_size or repeat existed).
        older = {k: v for k, v in legacy.items() if k not in ("chunk_size", "repeat", "shard")}
        assert workload_digest(older) == old_workload(older) == workload_digest(legacy)


def test_workload_leaves_out_the_method_and_the_batch(jobs: list[JobConfig]) -> None:
    plain = workload_config(to_plain_dict(jobs[0]))
    assert set(plain) == {"model", "dataset", "sampling", "engine", "max_samples"}
    assert "max_num_seqs" not in plain["engine"] and plain["engine"]["backend"] == "vllm"


def _undeclared(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if IDENTITY not in f.metadata]


def test_every_top_level_field_declares_its_identities() -> None:
    assert _undeclared(JobConfig) == [], "declare metadata=identities(...) on these JobConfig fields"

    # The check itself can fail: a field added without a declaration is named.
    @dataclasses.dataclass
    class Grown(JobConfig):
        prompt_cache: bool = False

    assert _undeclared(Grown) == ["prompt_cache"]


def test_section_fields_only_narrow_their_section() -> None:
    fields = field_identities()
    for key, declared in fields.items():
        parent = key.rpartition(".")[0]
        if parent:
            assert declared.identities <= fields[parent].identities, key
    assert fields["engine.max_num_seqs"].identities == {Identity.run_folder, Identity.engine}
    assert fields["engine.seed"].identities == set(Identity)


def test_readme_says_exactly_what_the_run_folder_digest_covers() -> None:
    readme = (PROJECT_ROOT / "docs" / "outputs.md").read_text()
    match = re.search(r"`<hash>`\s+covers\s+((?:`\w+`(?:,\s+|\s+and\s+)?)+)", readme)
    assert match, "README: the sentence '`<hash>` covers `a`, `b` and `c`' is gone"
    assert re.findall(r"`(\w+)`", match.group(1)) == identity_fields(Identity.run_folder)
    left_out = re.search(r"It\s+leaves\s+out\s+((?:`\w+`(?:,\s+|\s+and\s+)?)+)", readme)
    assert left_out, "README: the sentence 'It leaves out `a`, `b` and `c`' is gone"
    covered = identity_fields(Identity.run_folder)
    others = [f.name for f in dataclasses.fields(JobConfig) if f.name not in covered]
    assert re.findall(r"`(\w+)`", left_out.group(1)) == others


def test_server_keys_count_only_for_server_jobs() -> None:
    offline = compose_job([])
    server = compose_job(["engine.backend=server"])
    for overrides in (["engine.max_concurrency=4"], ["engine.api=chat"]):
        # Another value of a server-only key: a new folder for a server job, the same one for an offline job's
        # record (run.json files carry every backend's keys); typed for an offline job, it is refused.
        assert run_folder_digest(compose_job(["engine.backend=server", *overrides])) != run_folder_digest(server)
        recorded = to_plain_dict(offline)
        key, _, value = overrides[0].removeprefix("engine.").partition("=")
        recorded["engine"][key] = int(value) if value.isdigit() else value
        assert project(recorded, Identity.run_folder) == run_folder_config(offline)
        with pytest.raises(ConfigError, match=f"engine.{key}={value} is a knob of engine.backend=server"):
            compose_job(overrides)
    # Where the server listens and how the job talks to it change nothing generated: a restart elsewhere resumes.
    moved = compose_job(["engine.backend=server", "engine.url=http://10.0.0.2:9000/v1", "engine.retries=0"])
    assert run_folder_digest(moved) == run_folder_digest(server)
    # The API style decides the prompts (chat: the server's template), so it is part of the workload.
    chat = to_plain_dict(compose_job(["engine.backend=server", "engine.api=chat"]))
    assert workload_digest(chat) != workload_digest(to_plain_dict(server))
    assert "max_concurrency" not in workload_config(chat)["engine"]


def test_engine_multiprocessing_counts_only_when_set_and_only_for_vllm() -> None:
    default = compose_job([])
    assert run_folder_digest(compose_job(["engine.multiprocessing=true"])) != run_folder_digest(default)
    assert run_folder_digest(compose_job(["engine.multiprocessing=false"])) != run_folder_digest(default)
    assert "multiprocessing" not in run_folder_config(default)["engine"]
    dummy = compose_job(["engine.backend=dummy"])
    # A dummy job's record with it (run.json files carry every backend's keys) keeps the dummy's folder; typed for
    # a dummy job, it is refused.
    recorded = to_plain_dict(dummy)
    recorded["engine"]["multiprocessing"] = True
    assert project(recorded, Identity.run_folder) == run_folder_config(dummy)
    with pytest.raises(ConfigError, match="engine.multiprocessing=true is a knob of engine.backend=vllm"):
        compose_job(["engine.backend=dummy", "engine.multiprocessing=true"])
