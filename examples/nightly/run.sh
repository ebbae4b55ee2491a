#!/usr/bin/env bash
# The device farm's nightly job: check the farm, run the matrix on it, keep the
# history and write the morning report.
#
#   examples/nightly/run.sh [extra pytest args]
#
# FLEET (default: this directory's farm.toml), OUT (default: out/), TESTS
# (default: examples/), PYTHON (default: python3, the one pytest-ondevice is
# installed for) and BISECT (see below) may be set in the environment. The exit
# status is the test runs': non-zero when a test failed (in either build) or a
# device could not be used.
#
# Two runs: the night's verdicts and latency come from a plain build (its figures
# are latency); code coverage from the same tests built with gcov, whose bench
# bodies run once, unmeasured: an instrumented build's figures are not latency
# (docs/farm.md, "The nightly job").
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
FLEET="${FLEET:-$here/farm.toml}"
OUT="${OUT:-out}"
TESTS="${TESTS:-examples/}"
# under -n, xdist swallows pytest's "file or directory not found": a night of no tests
if [ ! -e "$TESTS" ]; then
  echo "nightly: TESTS=$TESTS does not exist here ($(pwd)): set TESTS to your tests' directory" >&2
  exit 2
fi
mkdir -p "$OUT"

# What is reachable and what is missing; a board that cannot run is said here and
# again by its tests' errors, so the run goes on with the others.
doctor=0
pytest-ondevice doctor --fleet "$FLEET" || doctor=$?
case "$doctor" in
  0) ;;
  10) echo "nightly: some devices cannot be used (see above); their boards' binaries go to the others" ;;
  *) echo "nightly: some boards cannot run (see above); running the rest" ;;
esac

status=0
pytest --fleet="$FLEET" -n auto "$TESTS" -p no:cacheprovider \
  --junitxml="$OUT/junit.xml" --bench-json="$OUT/bench.json" --history="$OUT/history.db" "$@" || status=$?

# Coverage: its own JUnit and history (its verdicts, its records marked as the gcov build's);
# its figures are then added to the night's run in history.db, for the report.
covered=0
pytest --fleet="$FLEET" -n auto "$TESTS" -p no:cacheprovider --bench-disable \
  --junitxml="$OUT/junit-coverage.xml" --history="$OUT/coverage-history.db" \
  --ondevice-coverage --ondevice-coverage-dir="$OUT/coverage" "$@" || covered=$?
"${PYTHON:-python3}" -m pytest_ondevice.records.history add-coverage "$OUT/coverage-history.db" "$OUT/history.db" \
  || echo "nightly: the coverage figures are not in the report (see above)"
if [ "$status" = 0 ] && [ "$covered" != 0 ]; then
  echo "nightly: the coverage build failed where the plain build passed (see $OUT/junit-coverage.xml)"
  status=$covered
fi

# BISECT=1: find the commit of each new failure and each slower kernel since the night
# before (a git checkout; a budget of BISECT_STEPS steps each, BISECT_MINUTES in all), on
# devices leased from the same farm; the report shows "first bad" beside each.
if [ "${BISECT:-0}" = 1 ]; then  # nothing new: it says so and is done
  pytest-ondevice bisect --history "$OUT/history.db" --max-steps "${BISECT_STEPS:-8}" \
    --max-minutes "${BISECT_MINUTES:-30}" --fleet="$FLEET" || echo "nightly: not every regression was bisected (see above)"
fi

pytest-ondevice report "$OUT/history.db" --html "$OUT/nightly.html" || status=${status:-1}
echo "nightly: report in $OUT/nightly.html, JUnit in $OUT/junit.xml, history in $OUT/history.db, coverage in $OUT/coverage/ (its run: $OUT/junit-coverage.xml, $OUT/coverage-history.db)"
exit "$status"
