#!/usr/bin/env bash
# Sets up what is missing, then runs the project's test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow" for the quick run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --rust --arm64-libs --cuda --aot  # the suite tests Rust crates, arm64 harness libraries, CUDA builds and compiled models
VENV="${VIRTUAL_ENV:-${ONDEVICE_VENV:-.venv}}"
export PATH="$(cd "$VENV/bin" && pwd):$PATH"  # the tests call the tools installed there
"$VENV/bin/python" -m ruff check .
# mypy over the package as the wheel installs it: transports/ is pytest_ondevice.transports
# there, so it is seen through a link in the (git-ignored) build output ([tool.mypy])
mkdir -p build/mypy-layout/pytest_ondevice
ln -sfn ../../../transports build/mypy-layout/pytest_ondevice/transports
"$VENV/bin/python" -m mypy
# The docs site (mkdocs.yml, docs/): --strict fails on a broken link or anchor, or a page
# left out of the nav. Its output is shown only when it fails (mkdocs' own -q would also
# hide the warnings --strict counts, and pass).
docs_site="$(mktemp -d)"
if ! NO_MKDOCS_2_WARNING=1 "$VENV/bin/python" -m mkdocs build --strict --site-dir "$docs_site" >"$docs_site.log" 2>&1; then
  cat "$docs_site.log"
  echo "test.sh: the docs site does not build (mkdocs build --strict)" >&2
  rm -rf "$docs_site" "$docs_site.log"
  exit 1
fi
rm -rf "$docs_site" "$docs_site.log"
status=0
"$VENV/bin/python" -m pytest tests "$@" || status=$?
# pytest's 5 means "no tests collected" (e.g. a -k that matched nothing): not a failure of the suite
if [ "$status" -eq 5 ]; then
  echo "test.sh: no tests were collected (pytest exit 5)"
  exit 0
fi
exit "$status"
