#!/usr/bin/env bash
# Builds the whole book, every notebook executed, warnings as errors.
# Output: _build/html/index.html
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/setup_env.sh
source scripts/cpu_isa.sh  # CPU results the same bits on every x86-64 machine
export ANDREA_BOOK_BUILD=1
if ! command -v g++ >/dev/null && ! command -v c++ >/dev/null && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null; then
  echo "[setup] installing g++ for the CPU simulator (backend='cpu-sim', kernel cells, puzzles)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null) \
    || echo "[setup] g++ could not be installed: the chapters say so and run the emulator"
fi
start=$(date +%s)
python scripts/jupyter_book_build.py . --all -W -n --keep-going
echo "[book] built in $(( $(date +%s) - start )) s: open $root/_build/html/index.html"
