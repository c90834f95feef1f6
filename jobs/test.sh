#!/usr/bin/env bash
# The test suite as `make test` runs it, with llama-server built beside it.
#
#   bash jobs/test.sh [pytest arguments...]
#
# On a fresh machine building llama-server takes 8 minutes of both cores, a sixth of the suite's budget; the suite
# keeps the cores busy only part of the time (processes starting, servers and Slurm waited for). So the build (a
# no-op once built) runs while the tests run, in the idle scheduling class (SCHED_IDLE: it gets a core only when no
# test wants it), and the llama.cpp tests, collected last, wait for it (SPECBATCH_LLAMA_BUILD_PID; tests/conftest.py).
# Not merely niced: vLLM's CPU engine runs one OpenMP thread per core and each step waits for the slowest, so a
# compiler at nice 10 on one core slowed the vLLM fixtures 2-4x (k_schedule_cpu 330 s against 86 s), more than the
# overlap saved. The build never outlives this script: it is waited for at the end (so the machine is set up whatever
# the tests selected) and stopped with its whole process group if the tests are.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
CACHE="${SPECBATCH_CACHE:-$HOME/.cache/specbatch}"
mkdir -p "$CACHE"
LOG="$CACHE/llama.cpp-install.log"

# A session of its own, so the build's compilers can be stopped as one group.
setsid chrt --idle 0 bash jobs/llama_cpp.sh install >"$LOG" 2>&1 &
build=$!
stop_build() { kill -TERM -- "-$build" 2>/dev/null; wait "$build" 2>/dev/null; }
trap 'stop_build; exit 130' INT
trap 'stop_build; exit 143' TERM
echo "[test] building llama-server beside the tests when missing (log: $LOG)" >&2

SPECBATCH_LLAMA_BUILD_PID=$build "$VENV/bin/python" -m pytest "$@"
tests=$?

wait "$build"
built=$?
trap - INT TERM
if [[ $built -ne 0 ]]; then
  echo "[test] jobs/llama_cpp.sh install failed (exit $built); the end of its log:" >&2
  tail -n 30 "$LOG" >&2
  [[ $tests -ne 0 ]] || tests=$built
fi
exit "$tests"
