#!/usr/bin/env bash
# `make test`: the set-up, then the test suite, with llama-server built beside both.
#
#   bash jobs/test.sh [pytest arguments...]
#
# On a fresh machine building llama-server takes 8 minutes of both cores, a sixth of the suite's budget, while the
# set-up (pip, apt) and the tests leave a core idle part of the time (one-core installs, servers and Slurm waited
# for). So the build starts first and compiles in the idle scheduling class (SCHED_IDLE: it gets a core only when
# nothing else wants it) during the set-up and the tests; its last step, a request answered by the built server,
# waits for the set-up (it needs the venv and the embedded model). The llama.cpp tests, run after the vLLM ones, wait
# for it (SPECBATCH_LLAMA_BUILD_PID; tests/conftest.py). Not merely niced: a compiler at nice 10 slowed the vLLM
# fixtures 2-4x when their engines ran a thread per core. And one compiler at a time (LLAMA_BUILD_JOBS=1): even in
# SCHED_IDLE, two compilers slowed the tests beside them by a quarter to a half, one did not (a fresh AVX2-only EPYC,
# tests/analysis/test_distribution_cpu.py beside tests/engine/test_methods_cpu.py on two workers, fixture set-up s:
# 149 and 72 alone; 187 and 107 beside two compilers; 148 and 69 beside one; two SCHED_IDLE busy loops: 179 and 93).
# On the whole suite the gain was within noise (docs/performance.md); the build itself took 623 s with one
# compiler, 672 and 773 s with two. The llama.cpp tests run after the vLLM files, about half the suite.
# The build never outlives this script: it is waited for at the end (so the machine is set up whatever the tests
# selected) and stopped with its whole process group if the set-up fails or the tests are stopped.
set -uo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv}"
CACHE="${SPECBATCH_CACHE:-$HOME/.cache/specbatch}"
mkdir -p "$CACHE"
LOG="$CACHE/llama.cpp-install.log"
say() { echo "[test] $*" >&2; }

# The build's compilers come from Debian before anything else runs apt-get (one apt-get at a time).
bash jobs/llama_cpp.sh tools || exit

# Created once the set-up is done: the build's check of the server waits for it.
SET_UP=$(mktemp -u "${TMPDIR:-/tmp}/specbatch-set-up.XXXXXX")
# A session of its own, so the build's compilers can be stopped as one group.
LLAMA_BUILD_JOBS=1 setsid chrt --idle 0 bash -c '
  bash jobs/llama_cpp.sh compile || exit
  # (Given up if this script is gone without saying.)
  while [[ ! -e "$1" ]]; do kill -0 "$2" 2>/dev/null || exit 1; sleep 1; done
  bash jobs/llama_cpp.sh install' build "$SET_UP" $$ >"$LOG" 2>&1 &
build=$!
# An apt-get stopped half way leaves dpkg to be repaired: the Debian installs beside the set-up are waited for.
debian=
stop_build() {
  kill -TERM -- "-$build" 2>/dev/null
  wait "$build" 2>/dev/null
  [[ -z "$debian" ]] || wait "$debian" 2>/dev/null
  rm -f "$SET_UP"
}
trap 'stop_build; exit 130' INT
trap 'stop_build; exit 143' TERM
say "building llama-server beside the set-up and the tests when missing (log: $LOG)"

# The set-up (each step a no-op once done): the venv and the embedded model, and beside it (apt-get, one at a time,
# while pip installs: 45 s of a fresh machine's set-up no longer in line) the Slurm tests' single-node cluster and the
# UI test's chromium.
bash -c 'bash jobs/slurm/cluster.sh install && bash jobs/browser.sh install' &
debian=$!
bash jobs/setup.sh
status=$?
wait "$debian"
debian_status=$?
debian=
[[ $status -ne 0 ]] || status=$debian_status
if [[ $status -ne 0 ]]; then
  stop_build
  exit "$status"
fi
touch "$SET_UP"

# Two workers, one test file each at a time (a module's shared engine stays in one process): a job keeps about one
# core busy (imports, Python between engine steps, servers and Slurm waited for), so two side by side fill both cores.
# Each worker runs its engines on one thread, in a temporary folder of its own; files go in the order
# tests/conftest.py sorts them (not xdist's, which reorders by test count). Later arguments win:
# make test PYTEST_ARGS="-n 0" runs the tests one after another. The slowest tests close the report, so that every run
# (CI's too) shows where the suite's budget goes.
SPECBATCH_LLAMA_BUILD_PID=$build "$VENV/bin/python" -m pytest -n 2 --dist loadfile --no-loadscope-reorder \
  --durations=30 "$@"
tests=$?

wait "$build"
built=$?
rm -f "$SET_UP"
trap - INT TERM
if [[ $built -ne 0 ]]; then
  say "building or checking llama-server failed (exit $built); the end of its log:"
  tail -n 30 "$LOG" >&2
  [[ $tests -ne 0 ]] || tests=$built
fi
exit "$tests"
