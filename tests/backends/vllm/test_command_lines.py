"""Server command lines equal the offline job's engine: parsed back by vLLM's own parser, Dynamo's guide command,
SGLang's mapping and refusals, API keys only by name, jobs/serve.py --print, and compare's serve command."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import PROJECT_ROOT, compose_job
from specbatch.analysis.compare import CompareRow, Comparison, Recommendation
from specbatch.analysis.report import serve_commands
from specbatch.backends.sglang.sglang_commands import dynamo_sglang_argv, sglang_argv
from specbatch.backends.vllm import vllm_args, vllm_offline
from specbatch.backends.vllm.listen import listen_address
from specbatch.backends.vllm.serve_commands import (
    SAKURA_MAX_TOKENS,
    SAKURA_PROMPT,
    batch_command,
    curl_example,
    dynamo_argv,
    dynamo_frontend_argv,
    serving_commands,
    vllm_console_script_broken,
    vllm_serve_argv,
    vllm_serve_command,
)
from specbatch.backends.vllm.vllm_args import llm_kwargs, offline_environment, speculative_config, vllm_environment
from specbatch.backends.vllm.vllm_server import server_process_environment
from specbatch.common.atomic_files import atomic_write_json
from specbatch.config import ConfigError, JobConfig, to_plain_dict
from specbatch.engine import engine_fingerprint

SERVE = PROJECT_ROOT / "jobs" / "serve.py"
GPU_PRESETS = [
    ["model=llama31_8b_instruct", "spec=eagle", "engine=gpu"],
    ["model=llama31_8b_instruct", "spec=eagle3", "engine=gpu"],
    ["model=llama31_8b_instruct", "spec=draft_model", "engine=gpu"],
    ["model=mimo_7b_base", "spec=mtp", "engine=gpu"],
    ["spec=ngram", "engine=gpu"],
    ["spec=suffix", "engine=gpu"],
    ["spec=none", "engine=gpu"],
]
# The default CPU job, every GPU preset, and one that sets every optional flag.
JOBS = [
    [],
    # Seeded sampling on this machine (no GPU): prompts are prefilled whole (--no-enable-chunked-prefill).
    ["sampling=sampled", "spec=ngram"],
    *GPU_PRESETS,
    [
        "model=llama31_8b_instruct",
        "spec=eagle3",
        "engine=gpu",
        "model.tokenizer=meta-llama/Llama-3.1-8B-Instruct",
        "model.revision=main",
        "model.trust_remote_code=true",
        "engine.max_num_seqs=4",
        "spec.revision=main",
        "spec.draft_sample_method=probabilistic",
        "engine.seed=7",
    ],
    # A k per batch size reaches the server in --speculative-config as it reaches vllm.LLM.
    ["spec.k_schedule=[[1,4,5],[5,16,3],[17,256,0]]"],
]
# NVIDIA Dynamo's guide (quoted by issue 14), the command --print must reproduce for its preset below.
DYNAMO_GUIDE = (
    "python -m dynamo.vllm --model meta-llama/Meta-Llama-3.1-8B-Instruct --enforce-eager --speculative_config "
    '\'{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "draft_tensor_parallel_size": 1, "num_speculative_tokens": 2, '
    '"method": "eagle3"}\' --gpu-memory-utilization 0.8'
)
DYNAMO_PRESET = [
    "model=llama31_8b_instruct",
    "spec=eagle3",
    "engine=gpu",
    "engine.enforce_eager=true",
    "engine.gpu_memory_utilization=0.8",
    "spec.num_speculative_tokens=2",
    "spec.draft_tensor_parallel_size=1",
]
# Engine arguments whose parsed default is spelled differently from the dataclass default (None or '' for True,
# False, None): vLLM's parser does this for every server, whatever the job.
PARSER_DEFAULT_SPELLINGS = {"mm_device_do_normalize", "enable_lora", "reasoning_parser_plugin"}
SECRET = "sk-test-do-not-print-4711"


@pytest.fixture(scope="module")
def vllm_cli() -> Any:
    """vLLM's OpenAI server parser and AsyncEngineArgs (loaded once: importing vLLM takes seconds)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser()), AsyncEngineArgs


def parsed_engine(vllm_cli: Any, argv: list[str], *, module: bool) -> tuple[Any, Any]:
    """(namespace, AsyncEngineArgs) as vLLM's own entry points build them from this argv."""
    parser, engine_args = vllm_cli
    if module:
        assert argv[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        args = parser.parse_args(argv[3:])
    else:
        assert argv[:2] == ["vllm", "serve"]
        args = parser.parse_args(argv[2:])
        args.model = args.model_tag  # what `vllm serve` does with its positional model (vllm/entrypoints/cli/serve.py)
    return args, engine_args.from_cli_args(args)


@pytest.mark.parametrize("overrides", JOBS, ids=lambda o: " ".join(o) or "default-cpu")
@pytest.mark.parametrize("module", [False, True], ids=["vllm-serve", "api-server-module"])
def test_vllm_parses_the_serve_command_back_into_the_offline_engine_arguments(
    vllm_cli: Any, overrides: list[str], module: bool
) -> None:
    job = compose_job(overrides)
    kwargs = llm_kwargs(job)
    args, engine = parsed_engine(vllm_cli, vllm_serve_argv(job, module=module), module=module)
    assert {key: getattr(engine, key) for key in kwargs} == kwargs
    # Nothing else is set: every other engine argument is what vllm.LLM(**llm_kwargs) gets by default.
    offline = vllm_cli[1](**kwargs)
    differing = {
        f.name
        for f in dataclasses.fields(engine)
        if getattr(engine, f.name) != getattr(offline, f.name) and f.name not in PARSER_DEFAULT_SPELLINGS
    }
    assert differing == set()
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    assert args.api_key is None and not engine.disable_log_stats  # /metrics keeps the spec-decode counters
    if job.spec.method.value != "none":
        assert engine.speculative_config == speculative_config(job.spec)


@pytest.mark.parametrize(
    ("overrides", "gpus", "whole"),
    [
        (["sampling=sampled"], 0, True),
        (["sampling=sampled", "sampling.seed=null"], 0, False),  # no seed, no generator to rewind
        ([], 0, False),  # greedy
        (["sampling=sampled", "engine=gpu"], 1, False),  # CUDA generators rewind
    ],
)
def test_seeded_sampling_without_a_gpu_prefills_prompts_whole(
    monkeypatch: pytest.MonkeyPatch, overrides: list[str], gpus: int, whole: bool
) -> None:
    machine = dataclasses.replace(vllm_args.this_machine(), gpu_count=gpus)
    monkeypatch.setattr(vllm_args, "this_machine", lambda: machine)
    job = compose_job(overrides)
    assert ("enable_chunked_prefill" in llm_kwargs(job)) is whole
    assert ("--no-enable-chunked-prefill" in vllm_serve_argv(job, module=False)) is whole
    # An engine built for greedy jobs is not shared with a seeded sampled one (test sessions, sweeps in a process).
    assert (engine_fingerprint(job) != engine_fingerprint(compose_job([*overrides, "sampling=greedy"]))) is whole


def test_served_model_name_follows_engine_served_model(vllm_cli: Any) -> None:
    args, _ = parsed_engine(vllm_cli, vllm_serve_argv(compose_job([]), module=False), module=False)
    assert args.served_model_name is None  # vLLM's default: the model path, which the job asks for
    job = compose_job(["engine.served_model=smol"])
    args, _ = parsed_engine(vllm_cli, vllm_serve_argv(job, module=False), module=False)
    assert args.served_model_name == ["smol"]
    assert json.loads(shlex.split(curl_example(job))[-1])["model"] == "smol"


@pytest.mark.parametrize(
    ("url", "address"),
    [("http://127.0.0.1:8000/v1", ("127.0.0.1", 8000)), ("http://localhost:9123/v1/", ("localhost", 9123))],
)
def test_the_server_listens_where_engine_url_points(url: str, address: tuple[str, int]) -> None:
    job = compose_job([f"engine.url={url}"])
    assert listen_address(job) == address
    argv = vllm_serve_argv(job, module=False)
    assert argv[argv.index("--host") + 1] == address[0] and argv[argv.index("--port") + 1] == str(address[1])
    assert dynamo_frontend_argv(job)[-1] == f"--http-port={address[1]}"


@pytest.mark.parametrize(
    ("url", "says"),
    [("https://127.0.0.1:8000/v1", "plain HTTP"), ("http://127.0.0.1:8000/openai/v1", "under /v1")],
)
def test_an_engine_url_vllm_cannot_serve_is_refused_naming_it(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"engine.url={url}")) as caught:
        vllm_serve_argv(compose_job([f"engine.url={url}"]), module=False)
    assert says in str(caught.value)


def flags(argv: list[str]) -> dict[str, Any]:
    """--flag value pairs (a flag without a value maps to True), JSON values parsed."""
    out: dict[str, Any] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            value: Any = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
            out[word] = json.loads(value) if isinstance(value, str) and value.startswith("{") else value
    return out


def test_the_dynamo_command_is_the_guides_for_its_preset(vllm_cli: Any) -> None:
    job = compose_job(DYNAMO_PRESET)
    ours, guide = dynamo_argv(job), shlex.split(DYNAMO_GUIDE)
    assert ours[:3] == guide[:3] == ["python", "-m", "dynamo.vllm"]
    # Our preset names the hub repo meta-llama/Llama-3.1-8B-Instruct; the guide uses its alias Meta-Llama-3.1-....
    guide[guide.index("--model") + 1] = job.model.path
    ours_flags, guide_flags = flags(ours), flags(guide)
    assert {flag: ours_flags.get(flag) for flag in guide_flags} == guide_flags  # JSON compared parsed, any key order
    # What the job sets beyond the guide's command, so the worker runs exactly the offline engine.
    assert {flag: ours_flags[flag] for flag in set(ours_flags) - set(guide_flags)} == {
        "--dtype": "bfloat16",
        "--max-model-len": "8192",
        "--tensor-parallel-size": "1",
        "--seed": "0",
        "--per-request-spec-decode-metrics": "summary",
    }
    # Dynamo's worker hands these flags to vLLM's own engine parser (components/src/dynamo/vllm/args.py).
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    engine_args = vllm_cli[1]
    parser = engine_args.add_cli_args(FlexibleArgumentParser())
    engine = engine_args.from_cli_args(parser.parse_args(ours[3:]))
    assert {key: getattr(engine, key) for key in llm_kwargs(job)} == llm_kwargs(job)


@pytest.mark.parametrize("overrides", GPU_PRESETS, ids=" ".join)
def test_every_gpu_preset_gives_a_dynamo_worker_with_the_offline_engine_arguments(
    vllm_cli: Any, overrides: list[str]
) -> None:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    job = compose_job(overrides)
    engine_args = vllm_cli[1]
    engine = engine_args.from_cli_args(
        engine_args.add_cli_args(FlexibleArgumentParser()).parse_args(dynamo_argv(job)[3:])
    )
    assert {key: getattr(engine, key) for key in llm_kwargs(job)} == llm_kwargs(job)


def test_sglang_command_for_the_dynamo_preset() -> None:
    assert sglang_argv(compose_job(DYNAMO_PRESET)) == [
        *["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"],
        *["--host", "127.0.0.1", "--port", "8000", "--dtype", "bfloat16", "--context-length", "8192"],
        *["--tp-size", "1", "--random-seed", "0", "--disable-cuda-graph", "--mem-fraction-static", "0.8"],
        *[
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        ],
        # k=2 drafted tokens as one chain: SGLang counts the verified position too.
        *["--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"],
    ]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model=llama31_8b_instruct", "spec=eagle"], {"--speculative-algorithm": "EAGLE"}),
        (
            # PARD as an ordinary draft: SGLang has no parallel drafting (test_gpu_presets: the preset is refused).
            ["model=llama31_8b_instruct", "spec=draft_model", "spec.parallel_drafting=null"],
            {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": "amd/PARD-Llama-3.2-1B"},
        ),
        # SGLang's own MiMo MTP example: EAGLE on the target's MTP layers, 1 step, topk 1, 2 draft tokens.
        (
            ["model=mimo_7b_base", "spec=mtp"],
            {
                "--speculative-algorithm": "EAGLE",
                "--speculative-num-steps": "1",
                "--speculative-eagle-topk": "1",
                "--speculative-num-draft-tokens": "2",
                "--trust-remote-code": True,
            },
        ),
        (
            ["spec=ngram", "spec.num_speculative_tokens=5", "spec.prompt_lookup_min=3", "spec.prompt_lookup_max=6"],
            {
                "--speculative-algorithm": "NGRAM",
                "--speculative-num-draft-tokens": "6",
                "--speculative-ngram-min-match-window-size": "3",
                "--speculative-ngram-max-match-window-size": "6",
                "--speculative-ngram-max-bfs-breadth": "1",
            },
        ),
        (
            ["spec=suffix", "spec.suffix_decoding_max_tree_depth=16", "spec.suffix_decoding_min_token_prob=0.2"],
            {
                "--speculative-algorithm": "SUFFIX",
                "--speculative-num-draft-tokens": "6",
                "--speculative-suffix-max-tree-depth": "16",
                "--speculative-suffix-min-token-prob": "0.2",
            },
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_sglang_maps_each_method(overrides: list[str], expected: dict[str, Any]) -> None:
    got = flags(sglang_argv(compose_job([*overrides, "engine=gpu"])))
    assert {flag: got.get(flag) for flag in expected} == expected
    if "--speculative-draft-model-path" not in expected and "eagle" not in " ".join(overrides):
        assert "--speculative-draft-model-path" not in got  # mtp, ngram and suffix draft without a checkpoint


def test_dflash_is_sglangs_dflash_with_its_block_and_dspark_is_refused() -> None:
    argv = sglang_argv(compose_job(["model=qwen3_8b", "spec=dflash", "engine=gpu"]))
    got = flags(argv)
    assert got["--speculative-algorithm"] == "DFLASH"
    assert got["--speculative-draft-model-path"] == "z-lab/Qwen3-8B-DFlash-b16"
    # The block SGLang verifies: the bonus token and vLLM's k=16 mask slots. One pass, so no steps or top-k.
    assert got["--speculative-num-draft-tokens"] == "17"
    assert "--speculative-num-steps" not in got and "--speculative-eagle-topk" not in got
    job = compose_job(["model=qwen3_4b_fp8", "spec=dspark", "engine=gpu"])
    with pytest.raises(ConfigError, match="spec.method=dspark: SGLang's speculative decoding docs name no such"):
        sglang_argv(job)
    printed = serving_commands(job, module=False)
    assert "# not served the same way by SGLang: spec.method=dspark" in printed
    assert "dynamo.sglang" not in printed and "python -m dynamo.vllm " in printed
    # Another method SGLang lacks is refused naming what SGLang serves, without DSpark's aside.
    with pytest.raises(ConfigError, match=r"spec.method=medusa: .*no such algorithm, .*SGLang serves spec=eagle") as e:
        sglang_argv(compose_job(["model=vicuna_7b_v13", "spec=medusa", "engine=gpu"]))
    assert "DSpark" not in str(e.value)


def test_dynamos_sglang_worker_is_launched_as_dynamos_example_with_sglangs_flags() -> None:
    job = compose_job(DYNAMO_PRESET)
    worker = dynamo_sglang_argv(job)
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert worker[:7] == ["python3", "-m", "dynamo.sglang", "--model-path", model, "--served-model-name", model]
    assert worker[-1] == "--enable-metrics"
    # The same SGLang flags as sglang.launch_server's, minus where it listens (the frontend's HTTP port).
    served = sglang_argv(job)
    assert worker[7:-1] == served[served.index("--dtype") :]
    assert "--host" not in worker and "--port" not in worker
    printed = serving_commands(job, module=False).splitlines()
    at = printed.index(shlex.join(worker))
    assert printed[at - 1] == "python -m dynamo.frontend --http-port=8000"
    assert printed[at - 2].startswith("# NVIDIA Dynamo with SGLang")


def test_sglang_without_speculation_is_a_plain_launch() -> None:
    argv = sglang_argv(compose_job(["spec=none", "engine=gpu", "engine.max_num_seqs=8"]))
    assert not [word for word in argv if word.startswith("--speculative")]
    assert flags(argv)["--max-running-requests"] == "8"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["model.tensor_parallel_size=2", "spec.draft_tensor_parallel_size=1"], "spec.draft_tensor_parallel_size=1"),
        (["spec.draft_sample_method=probabilistic"], "spec.draft_sample_method=probabilistic"),
    ],
)
def test_what_sglang_cannot_express_is_refused_with_the_key(overrides: list[str], key: str) -> None:
    job = compose_job(["model=llama31_8b_instruct", "spec=eagle3", "engine=gpu", *overrides])
    with pytest.raises(ConfigError, match=re.escape(key)):
        sglang_argv(job)
    # --print still prints vLLM's and Dynamo's commands, and says why SGLang's is missing.
    printed = serving_commands(job, module=False)
    assert "vllm serve " in printed and "python -m dynamo.vllm " in printed
    assert f"# not served the same way by SGLang: {key}" in printed


def test_a_k_schedule_is_not_passed_to_sglang_as_one_k() -> None:
    # SGLang has no k per batch size: serving its largest k there would not be what was measured.
    job = compose_job(["spec.k_schedule=[[1,4,5],[5,1024,2]]", "engine=gpu"])
    with pytest.raises(ConfigError, match=r"spec.k_schedule: SGLang takes one number of draft tokens"):
        sglang_argv(job)
    assert "# not served the same way by SGLang: spec.k_schedule" in serving_commands(job, module=False)


def test_the_environment_vllm_needs_is_one_function_for_the_engine_and_the_server() -> None:
    assert vllm_environment(compose_job([])) == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert vllm_environment(compose_job(["spec=suffix", "engine=gpu"])) == {"ARCTIC_INFERENCE_ENABLED": "0"}
    assert vllm_environment(compose_job(["engine=gpu"])) == {}
    assert vllm_serve_command(compose_job(["spec=suffix"]), module=False).startswith(
        "VLLM_CPU_KVCACHE_SPACE=2 ARCTIC_INFERENCE_ENABLED=0 vllm serve "
    )
    source = (PROJECT_ROOT / "src/specbatch/backends/vllm/vllm_offline.py").read_text()
    assert "_apply_environment(vllm_environment(job)," in source.split("def start(")[1]  # VllmEngine.start too


def test_the_offline_engine_sets_the_shared_environment_and_decides_multiprocessing_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = compose_job(["spec=suffix"])
    names = [*vllm_environment(job), *offline_environment(job)]
    for name in names:  # setenv first, so monkeypatch restores whatever was there before the test
        monkeypatch.setenv(name, "before")
        monkeypatch.delenv(name)
    monkeypatch.setattr(vllm_args, "_SET_FOR_ENGINES", {})  # what earlier engines of this test process set: none
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")  # the user's own value wins...
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # ...but engine.multiprocessing decides this one
    vllm_offline._apply_environment(vllm_environment(job), offline_environment(job))
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "7" and os.environ["ARCTIC_INFERENCE_ENABLED"] == "0"
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # no GPU here: in one process
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    # A later engine of the same process with engine.multiprocessing=true takes back what the first one set.
    again = compose_job(["spec=suffix", "engine.multiprocessing=true"])
    vllm_offline._apply_environment(vllm_environment(again), offline_environment(again))
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ


def test_the_server_gets_the_key_only_through_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    job = compose_job(["engine.cpu_kvcache_space_gib=3"])
    env = server_process_environment(job, {"OPENAI_API_KEY": SECRET, "PATH": "/bin", "VLLM_API_KEY": "stale"})
    assert env["VLLM_API_KEY"] == SECRET and env["VLLM_CPU_KVCACHE_SPACE"] == "3" and env["PATH"] == "/bin"
    # An explicit environment value wins, as in the offline engine.
    assert server_process_environment(job, {"VLLM_CPU_KVCACHE_SPACE": "1"})["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # No key for the job, none for the server: a VLLM_API_KEY left in the shell would lock the job out.
    assert "VLLM_API_KEY" not in server_process_environment(job, {"VLLM_API_KEY": "stale"})
    named = compose_job(["engine.api_key_env=MY_SERVER_API_KEY"])
    assert server_process_environment(named, {"MY_SERVER_API_KEY": SECRET})["VLLM_API_KEY"] == SECRET


def shell_words(line: str, environ: dict[str, str]) -> list[str]:
    """The words bash makes of ``line`` (variables expanded), without running it."""
    done = subprocess.run(
        ["bash", "-c", f'__words() {{ printf "%s\\0" "$@"; }}; __words {line}'],
        env={**environ, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split("\0")[:-1]


def test_api_key_values_stay_out_of_commands_and_curl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    for overrides in JOBS:
        job = compose_job(overrides)
        texts = [serving_commands(job, module=True), curl_example(job), batch_command(overrides)]
        texts += [" ".join(vllm_serve_argv(job, module=m)) for m in (False, True)] + [" ".join(dynamo_argv(job))]
        assert not [text for text in texts if SECRET in text]
    job = compose_job([])
    assert 'VLLM_API_KEY="$OPENAI_API_KEY" ' in vllm_serve_command(job, module=True)
    curl = curl_example(job)
    assert '-H "Authorization: Bearer $OPENAI_API_KEY"' in curl
    # Run by a shell that has the key, the curl sends it, and asks Dynamo's guide question.
    words = shell_words(curl, {"OPENAI_API_KEY": SECRET})
    assert words[:3] == ["curl", "-s", "http://127.0.0.1:8000/v1/chat/completions"]
    assert f"Authorization: Bearer {SECRET}" in words
    assert json.loads(words[-1]) == {
        "model": job.model.path,
        "messages": [{"role": "user", "content": SAKURA_PROMPT}],
        "max_tokens": SAKURA_MAX_TOKENS,
    }
    monkeypatch.delenv("OPENAI_API_KEY")
    assert "Authorization" not in curl_example(job) and "VLLM_API_KEY" not in vllm_serve_command(job, module=False)


def test_the_batch_command_reuses_the_overrides_against_the_server() -> None:
    overrides = ["spec=suffix", "engine.backend=vllm", "dataset.template='{q}'", "engine.url=http://h:1/v1"]
    words = shlex.split(batch_command(overrides))
    assert words[1:] == ["jobs/generate.py", "spec=suffix", "dataset.template='{q}'", "engine.url=http://h:1/v1"] + [
        "engine.backend=server"
    ]


def run_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SERVE), *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300
    )


def test_serve_print_shows_the_three_commands_for_a_gpu_preset() -> None:
    done = run_serve("--print", *DYNAMO_PRESET)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    job = compose_job(DYNAMO_PRESET)
    assert shlex.split(next(line for line in lines if line.startswith("vllm serve "))) == vllm_serve_argv(
        job, module=False
    )
    assert shlex.split(next(line for line in lines if "-m dynamo.vllm " in line)) == dynamo_argv(job)
    assert "python -m dynamo.frontend --http-port=8000" in lines
    assert shlex.split(next(line for line in lines if "sglang.launch_server" in line)) == sglang_argv(job)
    assert shlex.split(next(line for line in lines if "-m dynamo.sglang " in line)) == dynamo_sglang_argv(job)


def test_serve_refuses_a_bad_override_with_generates_error() -> None:
    served = run_serve("spec.prompt_lookup_mni=3")
    generated = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "jobs/generate.py"), "spec.prompt_lookup_mni=3"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert served.returncode == generated.returncode == 2
    message = "unknown key spec.prompt_lookup_mni: did you mean spec.prompt_lookup_min?"
    assert message in served.stderr and message in generated.stderr
    assert "Traceback" not in served.stderr


def write_run(root: Path, job: JobConfig | dict[str, Any]) -> str:
    root.mkdir(parents=True)
    config = job if isinstance(job, dict) else to_plain_dict(job)
    atomic_write_json(root / "run.json", {"config": config, "shard_count": 1, "created_with": {}})
    return str(root)


def recommended(batch_size: int, method: str, k: int | None, folder: str) -> tuple[CompareRow, Recommendation]:
    fields = {f.name for f in dataclasses.fields(CompareRow)}
    row = CompareRow(**dict.fromkeys(fields, None))
    row.model, row.dataset, row.dtype, row.batch_size, row.method, row.k = "m", "d", "float32", batch_size, method, k
    row.run_folders = [folder]
    rec = Recommendation("m", "d", "float32", batch_size, method, k, 2.0, {}, "fastest measured")
    return row, rec


def test_compare_prints_the_serve_command_of_each_recommendation(tmp_path: Path) -> None:
    single = compose_job(["engine.max_num_seqs=1", "model.dtype=float32"])
    full = compose_job(["spec=suffix", "engine.max_num_seqs=256", "model.dtype=float32"])
    here = vllm_console_script_broken()
    rows, recs = zip(
        recommended(1, "ngram", 3, write_run(tmp_path / "a", single)),
        recommended(256, "suffix", 5, write_run(tmp_path / "b", full)),
        strict=True,
    )
    assert serve_commands(Comparison(list(rows), list(recs), [], [])) == [
        f"serve batch size 1 (ngram k=3): {vllm_serve_command(single, module=here)}",
        f"serve batch size 256 (suffix k=5): {vllm_serve_command(full, module=here)}",
    ]
    # The same run winning at two batch sizes: one command for both.
    rows, recs = zip(*(recommended(size, "ngram", 3, str(tmp_path / "a")) for size in (1, 8)), strict=True)
    assert serve_commands(Comparison(list(rows), list(recs), [], [])) == [
        f"serve batch size 1 (ngram k=3), 8 (ngram k=3): {vllm_serve_command(single, module=here)}"
    ]
    # A run whose recorded config no longer builds is named, not fatal.
    broken = to_plain_dict(single) | {"bogus_key": 1}
    rows, recs = zip(recommended(1, "ngram", 3, write_run(tmp_path / "c", broken)), strict=True)
    [line] = serve_commands(Comparison(list(rows), list(recs), [], []))
    assert line.startswith(f"serve batch size 1: no command, as the config of {tmp_path / 'c'} fails: unknown key")
