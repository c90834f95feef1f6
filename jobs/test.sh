#!/usr/bin/env bash
# The test suite as `make test` runs it, with llama-server built beside it.
#
#   bash jobs/test.sh [pytest arguments...]
#
# On a fresh machine building llama-server takes 8 minutes of both cores, a sixth of the suite's budget; the tests
# leave the cores idle part of the time (servers and Slurm waited for). So the build (a no-op once built) runs while
# the tests run, in the idle scheduling class (SCHED_IDLE: it gets a core only when no test wants it), and the
# llama.cpp tests, run after the vLLM ones, wait for it (SPECBATCH_LLAMA_BUILD_PID; tests/conftest.py). Not merely
# niced: a compiler at nice 10 slowed the vLLM fixtures 2-4x when their engines ran a thread per core. The build never
# outlives this script: it is waited for at the end (so the machine is set up whatever the tests selected) and
# stopped with its whole process group if the tests are.
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

# Two workers, one test file each at a time (a module's shared engine stays in one process): a job keeps about one
# core busy (imports, Python between engine steps, servers and Slurm waited for), so two side by side fill both cores.
# Each worker runs its engines on one thread, in a temporary folder of its own; files go in the order
# tests/conftest.py sorts them (not xdist's, which reorders by test count). Later arguments win:
# make test PYTEST_ARGS="-n 0" runs the tests one after another.
SPECBATCH_LLAMA_BUILD_PID=$build "$VENV/bin/python" -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
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
