#!/usr/bin/env bash
# Builds the whole book, every notebook executed, warnings as errors.
# Output: _build/html/index.html
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/setup_env.sh
source scripts/cpu_isa.sh  # CPU results the same bits on every x86-64 machine
export ANDREA_BOOK_BUILD=1
start=$(date +%s)
jupyter-book build . --all -W -n --keep-going
echo "[book] built in $(( $(date +%s) - start )) s: open $root/_build/html/index.html"
