#!/usr/bin/env bash
# Sets up what is missing, then runs the examples on an emulated board (no hardware needed).
# Extra arguments go to pytest, e.g. scripts/demo.sh -v
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV="${VIRTUAL_ENV:-${ONDEVICE_VENV:-.venv}}"
BOARD="${ONDEVICE_DEMO_BOARD:-bluepill-qemu}"
exec "$VENV/bin/python" -m pytest --board="$BOARD" examples/ "$@"
