#!/usr/bin/env bash
# pytest-ondevice bisect on an emulated board: a throwaway repository of 16 commits
# (make_history.py), its bug and its slower kernel each found on a Blue Pill under QEMU.
#
#   examples/bisect/demo.sh [DIR]      (after scripts/setup.sh; DIR default: a new temp dir)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${VIRTUAL_ENV:-$here/../../.venv}"
dir="${1:-$(mktemp -d)/lib-repo}"
"$venv/bin/python" "$here/make_history.py" "$dir"
cd "$dir"
first="$(git rev-list --max-parents=0 HEAD)"
echo "== which commit broke ScalesByTwo?"
"$venv/bin/pytest-ondevice" bisect --good "$first" --board=bluepill-qemu scale_test.c::ScalesByTwo
echo "== which commit made work_kernel more than 10 % slower (instructions, exact under QEMU's icount)?"
"$venv/bin/pytest-ondevice" bisect --good "$first" --metric work_kernel --above +10% \
  --board=bluepill-qemu scale_test.c::BenchWork
