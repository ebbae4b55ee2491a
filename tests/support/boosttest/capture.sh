#!/usr/bin/env bash
# Re-records the Boost.Test transcripts test_boosttest.py parses, from cases.cpp: built as
# pytest-ondevice builds it (our observer, the framework header-only and our main,
# formats/harness/boosttest_*.cpp, and the host runtime) with Debian's Boost.Test 1.74 on the
# host and for aarch64 (the rpi board's flags with -fexceptions, which the framework needs, run
# under qemu-aarch64), run with pytest-ondevice's arguments; and with Boost.Test's own main
# alone (its log only). ONDEVICE_REC picks how the case "ends_the_run" ends it: segv, abort,
# forge, forge-nonce.
set -euo pipefail
cd "$(dirname "$0")"
out=$PWD
repo=$(cd ../../.. && pwd)
harness=$repo/pytest_ondevice/formats/harness
runtime=$repo/boards/runtime/host/ondevice_host.c
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# __FILE__ as pytest-ondevice's builds spell it: relative to the project
flags=(-O1 -g "-ffile-prefix-map=$out/=")
args=(--catch_system_errors=no --log_level=test_suite --color_output=no)

record() { # name command...: output (stdout and stderr, as the transports merge them), and
  # how it ended: its exit code, or the signal's name (Boost.Test exits with 200 and 201)
  local name=$1; shift
  python3 -c 'import signal, subprocess, sys
rc = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], "wb"), stderr=subprocess.STDOUT).returncode
print(signal.Signals(-rc).name if rc < 0 else rc)' "$out/$name.txt" "$@" >"$out/$name.rc"
}

g++ "${flags[@]}" -c cases.cpp -o "$tmp/cases.o"
for part in observer framework main; do
  g++ "${flags[@]}" -c "$harness/boosttest_$part.cpp" -o "$tmp/$part.o"
done
gcc -O1 -c "$runtime" -o "$tmp/runtime.o"
g++ "$tmp"/{cases,observer,framework,main,runtime}.o -o "$tmp/hooked"
for how in clean segv abort forge forge-nonce; do
  record "hooked_$how" env ONDEVICE_REC=$how "$tmp/hooked" "${args[@]}"
done

printf '#define BOOST_TEST_MAIN\n#include <boost/test/included/unit_test.hpp>\n' >"$tmp/own_main.cpp"
g++ "${flags[@]}" -c "$tmp/own_main.cpp" -o "$tmp/own_main.o"
g++ "$tmp"/{cases,own_main,runtime}.o -o "$tmp/console"
for how in clean segv; do
  record "console_$how" env ONDEVICE_REC=$how "$tmp/console" "${args[@]}"
done

arm=(aarch64-linux-gnu-g++ -mcpu=cortex-a53 -O2 -g -fno-exceptions -fno-rtti -fexceptions "-ffile-prefix-map=$out/=")
"${arm[@]}" -c cases.cpp -o "$tmp/a_cases.o"
for part in observer framework main; do
  "${arm[@]}" -c "$harness/boosttest_$part.cpp" -o "$tmp/a_$part.o"
done
aarch64-linux-gnu-gcc -O2 -c "$runtime" -o "$tmp/a_runtime.o"
aarch64-linux-gnu-g++ -static "$tmp"/a_{cases,observer,framework,main,runtime}.o -o "$tmp/a_hooked"
record qemu_aarch64_hooked_segv env ONDEVICE_REC=segv qemu-aarch64 "$tmp/a_hooked" "${args[@]}"
