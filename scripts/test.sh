#!/usr/bin/env bash
# Runs every test: library units, notebooks (fast mode), the book build with -W, a real browser.
# Sets up .venv and, where it can (root with apt-get), Debian's chromium for the browser tests
# and g++ for the CPU simulator (andrea_edu.kernels.cpu_sim).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/setup_env.sh
source scripts/cpu_isa.sh  # CPU results the same bits on every x86-64 machine
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "[setup] installing Debian's chromium for the browser tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "[setup] chromium could not be installed: browser tests will skip, saying why"
fi
if ! command -v g++ >/dev/null && ! command -v c++ >/dev/null && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null; then
  echo "[setup] installing g++ for the CPU simulator (backend='cpu-sim', kernel cells, puzzles)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null) \
    || echo "[setup] g++ could not be installed: the simulator's tests skip, saying why"
fi
# One worker per core, at most 4 (tests/conftest.py's xdist_scope keeps each file, and the built
# book with its browser, on one worker); ANDREA_TEST_WORKERS=1 runs them all in this process.
workers="${ANDREA_TEST_WORKERS:-$(python -c 'import os; print(max(1, min(os.cpu_count() or 1, 4)))')}"
xdist=()
if [ "$workers" -gt 1 ]; then xdist=(-n "$workers" --dist loadscope); fi
start=$(date +%s)
python -m pytest "${xdist[@]}" "$@"
echo "[tests] finished in $(( $(date +%s) - start )) s"
