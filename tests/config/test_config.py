"""Every config in conf/ composes and validates; bad values fail early with a message naming key and fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from conftest import CONF_DIR, PROJECT_ROOT, compose_config, compose_job, run_generate
from specbatch.auto.candidates import candidate_jobs
from specbatch.backends.vllm.vllm_args import llm_kwargs
from specbatch.config import CHECKPOINT_METHODS, ConfigError, SpecMethod, groups, to_job_config
from specbatch.config.overrides import (
    override_values,
    parse_overrides,
    swept_overrides,
    unknown_override_keys,
    without_keys,
)

GROUP_FILES = sorted((group, path.stem) for group in groups() for path in (CONF_DIR / group).glob("*.yaml"))
MODEL_SPEC_FILES = sorted(path.stem for path in (CONF_DIR / "model_spec").glob("*.yaml"))
# Dataset presets for the user's own files: the path (and, for plain text, the template) come from the command line.
NEEDS_PATH = {"local": ["dataset.template='{prompt}'"], "spec_bench": []}
# A model with a preset for each checkpoint method, to compose spec presets that need a checkpoint: the tiny family
# where it has a stand-in, else the GPU preset vLLM's own tests pair it with (DSpark has no CPU stand-in: README).
PAIRED_MODEL = "tiny_llama"
PAIRED_MODELS = {"dspark": ["model=qwen3_4b_fp8", "engine=gpu"]}
# Spec presets whose acceptance profile comes from the command line.
NEEDS_PROFILE = {"simulate": ["spec.synthetic_acceptance_rates=[0.8,0.5,0.2]"]}


def test_every_group_has_presets() -> None:
    for group in groups():
        assert any(g == group for g, _ in GROUP_FILES), f"conf/{group}/ has no preset"


@pytest.mark.parametrize(("group", "name"), GROUP_FILES)
def test_every_preset_composes_and_validates(group: str, name: str) -> None:
    overrides = [f"{group}={name}"]
    if group == "spec" and SpecMethod(name) in CHECKPOINT_METHODS:
        overrides += PAIRED_MODELS.get(name, [f"model={PAIRED_MODEL}"])
    if group == "spec":
        overrides += NEEDS_PROFILE.get(name, [])
    if group == "model" and name == "tiny_mimo":
        overrides.append("spec=mtp")
    if group == "dataset" and name in NEEDS_PATH:
        overrides += ["dataset.path=my.jsonl", *NEEDS_PATH[name]]
    job = compose_job(overrides)
    section = getattr(job, group)
    assert isinstance(section, groups()[group])
    # The engine arguments are derived without loading anything, GPU presets included (spec=auto's: its
    # candidates', each an engine of its own).
    for each in candidate_jobs(job) if job.spec.method is SpecMethod.auto else [job]:
        kwargs = llm_kwargs(each)
        assert kwargs["model"] == job.model.path


def _pair_for(model_spec: str) -> tuple[str, str]:
    names = {g: [n for gg, n in GROUP_FILES if gg == g] for g in ("model", "spec")}
    pairs = [(m, sp) for m in names["model"] for sp in names["spec"] if f"{m}_{sp}" == model_spec]
    assert len(pairs) == 1, f"conf/model_spec/{model_spec}.yaml matches no single model_spec: ${{model}}_${{spec}}"
    return pairs[0]


@pytest.mark.parametrize("name", MODEL_SPEC_FILES)
def test_every_model_spec_preset_is_selected_by_its_model_and_method(name: str) -> None:
    model, spec = _pair_for(name)
    engine = "engine=cpu" if model.startswith("tiny") else "engine=gpu"
    job = compose_job([f"model={model}", f"spec={spec}", engine])
    if spec == "auto":
        # Its checkpoint methods join the candidates (tests/auto check each is what spec=<method> pairs).
        assert job.spec.auto is not None and job.spec.auto.checkpoints
        return
    assert job.spec.method is SpecMethod(spec) and job.spec.model
    kwargs = llm_kwargs(job)
    assert kwargs["speculative_config"]["model"] == job.spec.model
    assert kwargs["speculative_config"]["method"] == spec
    # The command line always wins over the preset.
    assert compose_job([f"model={model}", f"spec={spec}", "spec.model=/my/head"]).spec.model == "/my/head"


@pytest.mark.parametrize(
    ("model", "spec", "checkpoint"),
    [
        ("llama31_8b_instruct", "eagle", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"),
        ("llama31_8b_instruct", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
    ],
)
def test_gpu_presets_as_a_gpu_user_runs_them(model: str, spec: str, checkpoint: str) -> None:
    job = compose_job([f"model={model}", f"spec={spec}", "engine=gpu"])
    kwargs = llm_kwargs(job)
    assert kwargs["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert kwargs["speculative_config"] == {"method": spec, "num_speculative_tokens": 3, "model": checkpoint}
    assert kwargs["enforce_eager"] is False and kwargs["gpu_memory_utilization"] == 0.9
    assert kwargs["tensor_parallel_size"] == 1 and kwargs["dtype"] == "bfloat16"


def test_mtp_gpu_preset() -> None:
    kwargs = llm_kwargs(compose_job(["model=mimo_7b_base", "spec=mtp", "engine=gpu"]))
    assert kwargs["model"] == "XiaomiMiMo/MiMo-7B-Base"
    assert kwargs["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 1}


def test_default_is_the_embedded_cpu_setup() -> None:
    job = compose_job()
    assert job.model.embedded == "smollm2" and job.model.name == "smollm2-135m-instruct"
    assert job.spec.method is SpecMethod.ngram and job.spec.k == 3
    assert job.dataset.name == "humaneval_edit" and job.dataset.chat
    assert job.engine.name == "cpu" and job.engine.enforce_eager
    assert job.tracking.uri == "sqlite:///outputs/mlflow.db"
    kwargs = llm_kwargs(job)
    assert kwargs["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert kwargs["per_request_spec_decode_metrics"] == "summary"
    assert kwargs["disable_log_stats"] is False


def test_baseline_has_no_speculative_config() -> None:
    kwargs = llm_kwargs(compose_job(["spec=none"]))
    assert "speculative_config" not in kwargs
    assert "per_request_spec_decode_metrics" not in kwargs  # vLLM rejects it without speculation


def test_dataset_presets_for_own_files_say_what_is_missing() -> None:
    with pytest.raises(ConfigError, match="set exactly one of dataset.path .* and dataset.hub_id"):
        compose_job(["dataset=spec_bench"])
    with pytest.raises(ConfigError, match="dataset.template is empty: prompt_format=text needs one"):
        compose_job(["dataset=local", "dataset.path=x.jsonl"])


def test_hub_presets_name_their_source() -> None:
    job = compose_job(["dataset=mt_bench"])
    assert (job.dataset.hub_id, job.dataset.prompt_format, job.dataset.category_column) == (
        "philschmid/mt-bench",
        "turns",
        "category",
    )
    assert compose_job(["dataset=gsm8k"]).dataset.hub_config == "main"
    speed = compose_job(["dataset=speed_bench"]).dataset
    assert (speed.hub_id, speed.hub_config, speed.split, speed.category_column) == (
        "nvidia/SPEED-Bench",
        "qualitative",
        "test",
        "category",
    )
    assert (speed.prompt_format.value, speed.id_column) == ("turns", "question_id")


def test_many_samples_go_with_every_method() -> None:
    # Each sample is a request of its own (n=1), so vLLM's per-request spec figures exist for each.
    assert compose_job(["spec=none", "sampling.n=4", "sampling=sampled"]).sampling.n == 4
    assert compose_job(["spec=ngram", "sampling.n=4", "sampling=sampled"]).sampling.n == 4
    job = compose_job(["sampling=synthetic_data"])
    assert (job.sampling.temperature, job.sampling.top_p, job.sampling.n) == (1.0, 1.0, 4)


def test_model_based_knobs_reach_vllm() -> None:
    job = compose_job(
        [
            "model=tiny_llama",
            "spec=eagle3",
            "spec.draft_sample_method=probabilistic",
            "spec.draft_tensor_parallel_size=1",
        ]
    )
    assert llm_kwargs(job)["speculative_config"] == {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": job.spec.model,
        "draft_tensor_parallel_size": 1,
        "draft_sample_method": "probabilistic",
    }


def test_suffix_zero_values_vllm_accepts_reach_it() -> None:
    # vLLM 0.32: 0 cached requests turns the global suffix tree off; a spec factor of 0 is in its range too.
    job = compose_job(
        ["spec=suffix", "spec.suffix_decoding_max_cached_requests=0", "spec.suffix_decoding_max_spec_factor=0"]
    )
    config = llm_kwargs(job)["speculative_config"]
    assert config["suffix_decoding_max_cached_requests"] == 0 and config["suffix_decoding_max_spec_factor"] == 0


def test_suffix_knobs_reach_vllm() -> None:
    kwargs = llm_kwargs(compose_job(["spec=suffix", "spec.suffix_decoding_max_tree_depth=16"]))
    assert kwargs["speculative_config"] == {
        "method": "suffix",
        "num_speculative_tokens": 5,
        "suffix_decoding_max_tree_depth": 16,
    }


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["spec.num_speculative_tokens=0"], "spec.num_speculative_tokens=0 is out of range"),
        (["spec.num_speculative_tokens=99"], "use an integer from 1 to 16"),
        (["spec=none", "spec.num_speculative_tokens=3"], "spec.method=none drafts nothing"),
        (["spec.prompt_lookup_max=1"], "spec.prompt_lookup_max=1 is below spec.prompt_lookup_min=2"),
        (["spec.prompt_lookup_min=0", "spec.prompt_lookup_max=0"], "spec.prompt_lookup_min=0 must be 1 or more"),
        (
            ["spec=suffix", "spec.prompt_lookup_min=2"],
            "spec.prompt_lookup_min is not an option of spec.method=suffix (it belongs to ngram)",
        ),
        (["spec.suffix_decoding_max_tree_depth=8"], "is not an option of spec.method=ngram (it belongs to suffix)"),
        (
            ["spec.draft_tensor_parallel_size=2"],
            "spec.draft_tensor_parallel_size is not an option of spec.method=ngram",
        ),
        (["spec=suffix", "spec.suffix_decoding_min_token_prob=2"], "spec.suffix_decoding_min_token_prob=2.0 must be"),
        (
            ["spec=suffix", "spec.suffix_decoding_max_cached_requests=-1"],
            "spec.suffix_decoding_max_cached_requests=-1 must be 0 or more (0 turns the global tree off)",
        ),
        (["spec=suffix", "spec.suffix_decoding_max_spec_factor=-0.5"], "max_spec_factor=-0.5 must be 0 or more"),
        (["spec=mtp", "spec.model=/x"], "mtp drafts with the target's own MTP layers: remove spec.model"),
        (
            ["model=mimo_7b_base", "spec=eagle3"],
            "spec.model is not set: spec=eagle3 needs an EAGLE3 head trained for model.name=",
        ),
        (["spec=eagle"], "spec.model is not set: spec=eagle needs an EAGLE head"),
        (["spec=draft_model"], "spec.model is not set: spec=draft_model needs a draft model"),
        (["sampling.n=0", "spec=none"], "sampling.n=0 must be 1 or more"),
        (
            ["model=tiny_llama", "spec=draft_model", "spec.draft_tensor_parallel_size=2"],
            "spec.draft_tensor_parallel_size=2 with model.tensor_parallel_size=1",
        ),
        (
            [
                "model=llama31_8b_instruct",
                "model.tensor_parallel_size=4",
                "spec=eagle3",
                "spec.draft_tensor_parallel_size=2",
            ],
            "drafts only on 1 or 4 GPU(s)",
        ),
        (
            ["spec=mtp", "spec.num_speculative_tokens=0"],
            "spec.num_speculative_tokens=0 is out of range for spec.method=mtp",
        ),
        (["sampling.temperature=-1"], "sampling.temperature=-1.0 is negative"),
        (["sampling.top_p=0"], "sampling.top_p=0.0 must be in (0, 1]"),
        (["sampling.top_k=-3"], "sampling.top_k=-3 must be 0 (off)"),
        # Greedy samples are one completion n times over: refused, naming why and both ways out.
        (["sampling.n=4"], "sampling.n=4 with sampling.temperature=0 (greedy) gives 4 identical completions per row"),
        (["sampling=synthetic_data", "sampling.temperature=0"], "Set sampling.n=1, or sample (e.g. sampling=sampled"),
        (["sampling=sampled", "sampling.n=2", "sampling.top_k=1"], "sampling.n=2 with sampling.top_k=1 gives 2"),
        (["sampling.max_tokens=0"], "sampling.max_tokens=0 must be 1 or more"),
        (["sampling.max_tokens=4096"], "sampling.max_tokens=4096 leaves no room for the prompt"),
        (["model.max_model_len=8"], "model.max_model_len=8 is too small"),
        (["model.tensor_parallel_size=0"], "model.tensor_parallel_size=0 is invalid"),
        (["max_samples=0"], "max_samples=0 must be 1 or more"),
        (["engine.cpu_kvcache_space_gib=0"], "engine.cpu_kvcache_space_gib=0 must be 1 or more"),
        (["engine=gpu", "engine.gpu_memory_utilization=1.5"], "engine.gpu_memory_utilization=1.5 must be in (0, 1]"),
        (["tracking.uri=outputs/mlflow.db"], "tracking.uri='outputs/mlflow.db' is not a URI"),
        (["run_name=a/b"], "run_name='a/b' must be a plain folder name"),
        # Not a full disk: "File name too long" from the file system was blamed on disk space.
        ([f"run_name={'r' * 300}"], "run_name is 300 bytes long: at most 200 fit in a folder name"),
        (["stop_grace_seconds=-1"], "stop_grace_seconds=-1.0 must be 0 or more"),
        (["dataset.chat=false", "dataset.system_prompt=hi"], "dataset.system_prompt is set but dataset.chat=false"),
        (["dataset.hub_id=a/b"], "set exactly one of dataset.path (a local file) and dataset.hub_id"),
        (["dataset=mt_bench", "dataset.template='{x}'"], "dataset.template is set but dataset.prompt_format=turns"),
        (
            ["dataset=mt_bench", "dataset.chat=false"],
            "dataset.prompt_format=turns is a chat and needs dataset.chat=true",
        ),
    ],
)
def test_impossible_values_name_the_key_and_fix(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose_job(overrides)
    assert expected in str(err.value)


def _chain(exc: BaseException | None) -> str:
    """Hydra wraps the useful message: join the whole cause chain, as Hydra's CLI prints it."""
    parts = []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # Unknown key: Hydra names it and says how to add a key on purpose.
        (["sampling.max_tokenz=5"], "Key 'max_tokenz' not in 'SamplingConfig'"),
        # Wrong type: the value and the type it needed, with the full key.
        (["sampling.max_tokens=many"], "Value 'many' of type 'str' could not be converted to Integer"),
        (["sampling.max_tokens=many"], "full_key: sampling.max_tokens"),
        # Choices: every valid value is listed.
        (["model.dtype=float8"], "Invalid value 'float8', expected one of [auto, bfloat16, float16, float32]"),
        (
            # (medusa, the example before, is a method now: the list is the methods' modules, discovered.)
            ["spec.method=lookahead"],
            "Invalid value 'lookahead', expected one of "
            "[none, ngram, suffix, draft_model, eagle, eagle3, mtp, dflash, dspark, medusa, simulate, auto]",
        ),
        (["spec=eagle3", "spec.draft_sample_method=best"], "expected one of [greedy, probabilistic]"),
        # Unknown preset: Hydra lists the available ones.
        (["spec=eagle9"], "Available options in 'spec'"),
    ],
)
def test_unknown_keys_and_wrong_types_fail_at_compose(overrides: list[str], expected: str) -> None:
    with pytest.raises((HydraException, OmegaConfBaseException)) as err:
        compose_config(overrides)
    assert expected in _chain(err.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["+spec.prompt_lookup_mni=7"], "unknown key spec.prompt_lookup_mni: did you mean spec.prompt_lookup_min?"),
        (["++spec.prompt_lookup_mni=7"], "unknown key spec.prompt_lookup_mni: did you mean spec.prompt_lookup_min?"),
        (["+bogus_key=1"], "unknown key bogus_key: no key is like it (the closest is"),
        (["+shard.idx=1"], "unknown key shard.idx: did you mean shard.index? shard has only index, count"),
        (["+prompt_lookup_min=3"], "unknown key prompt_lookup_min: did you mean spec.prompt_lookup_min?"),
        (["+spec.suffix.depth=3"], "unknown key spec.suffix: "),
    ],
)
def test_added_keys_the_schema_lacks_are_refused(overrides: list[str], expected: str) -> None:
    # Hydra accepts a +key on a structured config; building the dataclasses would silently drop it.
    cfg = compose_config(overrides)
    with pytest.raises(ConfigError) as err:
        to_job_config(cfg)
    assert expected in str(err.value)


def test_known_keys_added_with_plus_plus_still_work() -> None:
    assert compose_job(["++spec.prompt_lookup_min=1"]).spec.prompt_lookup_min == 1


SPEC_TYPO = "unknown key spec.prompt_lookup_mni: did you mean spec.prompt_lookup_min?"
BOGUS = "unknown key bogus_key: no key is like it (the closest is "


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bogus_key=1"], BOGUS),
        (["+bogus_key=1"], BOGUS),
        (["+spec.prompt_lookup_mni=7"], SPEC_TYPO),
        (["sampling.max_tokenz=3"], "unknown key sampling.max_tokenz: did you mean sampling.max_tokens?"),
        (["-m", "spec=none,ngram", "+spec.prompt_lookup_mni=7,8"], SPEC_TYPO),
        (["--cfg", "job", "++bogus_key=1"], BOGUS),
    ],
)
def test_cli_unknown_key_is_one_line_naming_the_closest_key(args: list[str], expected: str, tmp_path) -> None:
    # Small settings so that a regression costs one short engine run, not the default job.
    small = ["max_samples=1", "sampling.max_tokens=8", "tracking=off", f"output_root={tmp_path}"]
    result = run_generate([*args, *small], timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"[ERROR] - {expected}" in lines[0], output[-3000:]
    # Hydra's own advice (append with +) is not shown, and nothing started: no sweep, no engine, no run.
    assert "To append to your config" not in output and "Traceback" not in output
    assert "vllm" not in output.lower()
    assert not (tmp_path / "runs").exists() and not (tmp_path / "_hydra" / "multirun").exists()


def test_override_keys_left_to_hydra(tmp_path) -> None:
    argv = [
        "-m",
        "hydra/launcher=slurm",
        "hydra.job.chdir=true",
        "model=tiny_llama",
        "spec@spec=ngram",
        "~model_spec",
        "spec.num_speculative_tokens=1,2,3",
        "shard.index=range(0,8)",
        "+run_name=x",
        "~dataset.seed",
    ]
    assert unknown_override_keys(argv, CONF_DIR) == []
    assert unknown_override_keys(["spec=ngram", "+bogus=1", "spec.k=2"], CONF_DIR) == ["bogus", "spec.k"]
    # A group the user brings in their own config folder is a group, not a key.
    (tmp_path / "prompts").mkdir()
    assert unknown_override_keys(["prompts=x"], CONF_DIR) == ["prompts"]
    assert unknown_override_keys(["--config-dir", str(tmp_path), "prompts=x"], CONF_DIR) == []
    assert unknown_override_keys(["--help", "bogus=1"], CONF_DIR) == []


def test_cli_sweep_values_and_group_choices_pass_the_key_check(tmp_path) -> None:
    # Both jobs of the sweep start (each then refuses its k), so the check let the sweep through untouched.
    args = ["-m", "spec=ngram", "spec.num_speculative_tokens=0,99", "hydra.job.chdir=false", "tracking=off"]
    result = run_generate([*args, f"output_root={tmp_path}"], timeout=120)
    output = result.stdout + result.stderr
    assert "spec.num_speculative_tokens=0 is out of range" in output, output[-3000:]
    assert "unknown key" not in output
    assert result.returncode == 2


def test_cli_output_root_empty_or_too_long_is_one_line_before_hydra_makes_a_folder(tmp_path) -> None:
    # output_root= (an unset variable in a batch script) wrote the rows into the working directory and Hydra's logs
    # into /_hydra, rc 0; a name longer than the file system takes stopped Hydra with a traceback.
    hydra_at_root = Path("/_hydra").exists()
    long = tmp_path / ("a" * 300)
    for value, says in [("", "output_root='' is empty"), (long, f"output_root={long} has a folder name of 'aaa")]:
        result = run_generate(
            [f"output_root={value}", "engine.backend=dummy", "tracking=off"], timeout=120, cwd=tmp_path
        )
        output = result.stdout + result.stderr
        assert result.returncode == 2, output[-3000:]
        [line] = [line for line in output.splitlines() if line.strip()]
        assert f"[ERROR] - {says}" in line and ("output_root=outputs" in line or "shorter output_root" in line)
        assert list(tmp_path.iterdir()) == [], "nothing is made in the working directory"
    assert Path("/_hydra").exists() == hydra_at_root
    # jobs/serve.py composes the same way and refuses it the same.
    serve = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "jobs" / "serve.py"), "--print", "output_root="],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert serve.returncode == 2 and "output_root='' is empty" in serve.stderr, serve.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


def test_an_api_caller_is_refused_an_empty_or_too_long_output_root(tmp_path) -> None:
    for value in ("", " "):
        with pytest.raises(ConfigError, match="is empty .*set output_root=<folder>"):
            compose_job([f"output_root='{value}'"])
    with pytest.raises(ConfigError, match="has a folder name of 'bbbb.*' \\(256 bytes\\), more than the 255 bytes"):
        compose_job([f"output_root={tmp_path / ('b' * 256)}"])


def test_cli_prints_config() -> None:
    result = run_generate(["--cfg", "job"], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "spec:\n  method: ngram" in result.stdout
    assert "dataset:\n  name: humaneval_edit" in result.stdout


def test_cli_bad_value_is_one_clear_line_before_any_model(tmp_path) -> None:
    result = run_generate([f"output_root={tmp_path}", "spec.num_speculative_tokens=0"], timeout=120)
    assert result.returncode == 2
    assert "spec.num_speculative_tokens=0 is out of range" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    # Nothing was loaded or written.
    assert "vllm" not in (result.stderr + result.stdout).lower().replace("vllm's", "")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("launcher", "gpus"), [("slurm", 1), ("slurm_cpu", None)])
def test_slurm_launcher_presets_compose(launcher: str, gpus: int | None) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    conf = cfg.hydra.launcher
    assert conf._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert conf.gpus_per_node == gpus and conf.max_num_timeout >= 1 and conf.array_parallelism >= 1


def test_overrides_are_read_by_hydras_parser_in_one_place() -> None:
    line = ["spec=none,ngram", "spec.k_schedule=[[1,4,3]]", "run_name='a,b'", "+tracking.tags.x=range(1,3)", "~y"]
    assert swept_overrides(line) == ["spec=none,ngram", "tracking.tags.x=range(1,3)"]
    assert override_values(line)["run_name"] == "'a,b'" and override_values(line)["y"] == "(deleted)"
    assert without_keys(["repeat=0,1", "+repeat=2", "~repeat", "spec=ngram", "spec.repeat_x=1"], "repeat") == [
        "spec=ngram",
        "spec.repeat_x=1",
    ]
    with pytest.raises(ConfigError, match="cannot read the overrides"):
        parse_overrides(["spec=[1,2"])
