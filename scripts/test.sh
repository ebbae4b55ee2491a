#!/usr/bin/env bash
# Sets up what is missing, then runs the project's test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow" for the quick run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --rust --arm64-libs  # the suite tests Rust crates and arm64 harness libraries
VENV="${VIRTUAL_ENV:-${ONDEVICE_VENV:-.venv}}"
export PATH="$(cd "$VENV/bin" && pwd):$PATH"  # the tests call the tools installed there
"$VENV/bin/python" -m ruff check .
status=0
"$VENV/bin/python" -m pytest tests "$@" || status=$?
# pytest's 5 means "no tests collected" (e.g. a -k that matched nothing): not a failure of the suite
if [ "$status" -eq 5 ]; then
  echo "test.sh: no tests were collected (pytest exit 5)"
  exit 0
fi
exit "$status"
