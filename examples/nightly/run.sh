#!/usr/bin/env bash
# The device farm's nightly job: check the farm, run the matrix on it, keep the
# history and write the morning report.
#
#   examples/nightly/run.sh [extra pytest args]
#
# FLEET (default: this directory's farm.toml), OUT (default: out/), TESTS
# (default: examples/) and BISECT (see below) may be set in the environment. The
# exit status is the test run's: non-zero when a test failed or a device could not
# be used.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
FLEET="${FLEET:-$here/farm.toml}"
OUT="${OUT:-out}"
TESTS="${TESTS:-examples/}"
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
  --junitxml="$OUT/junit.xml" --bench-json="$OUT/bench.json" --history="$OUT/history.db" \
  --ondevice-coverage --ondevice-coverage-dir="$OUT/coverage" "$@" || status=$?

# BISECT=1: find the commit of each new failure and each slower kernel since the night
# before (a git checkout; a budget of BISECT_STEPS steps each, BISECT_MINUTES in all), on
# devices leased from the same farm; the report shows "first bad" beside each.
if [ "${BISECT:-0}" = 1 ]; then  # nothing new: it says so and is done
  pytest-ondevice bisect --history "$OUT/history.db" --max-steps "${BISECT_STEPS:-8}" \
    --max-minutes "${BISECT_MINUTES:-30}" --fleet="$FLEET" || echo "nightly: not every regression was bisected (see above)"
fi

pytest-ondevice report "$OUT/history.db" --html "$OUT/nightly.html" || status=${status:-1}
echo "nightly: report in $OUT/nightly.html, JUnit in $OUT/junit.xml, history in $OUT/history.db, coverage in $OUT/coverage/"
exit "$status"
