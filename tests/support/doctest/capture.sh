#!/usr/bin/env bash
# Re-records the doctest transcripts test_doctest.py parses, from cases.cpp: built as
# pytest-ondevice builds it (our listener and main, formats/harness/doctest_*.cpp, and the host
# runtime) with Debian's doctest 2.4.9 on the host and for aarch64 (the rpi board's flags, run
# under qemu-aarch64, with -fno-exceptions); with doctest's own
# main and signal handler (a source's DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN) with and without our
# listener. ONDEVICE_REC picks how the case "ends the run" ends it: segv, abort, forge,
# forge-nonce.
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

record() { # name command...: output (stdout and stderr, as the transports merge them)
  local name=$1; shift
  set +e; "$@" >"$out/$name.txt" 2>&1; echo "$?" >"$out/$name.rc"; set -e
}

g++ "${flags[@]}" -c cases.cpp -o "$tmp/cases.o"
g++ "${flags[@]}" -c "$harness/doctest_listener.cpp" -o "$tmp/listener.o"
g++ "${flags[@]}" -c "$harness/doctest_main.cpp" -o "$tmp/main.o"
gcc -O1 -c "$runtime" -o "$tmp/runtime.o"
g++ "$tmp"/{cases,listener,main,runtime}.o -o "$tmp/hooked"
for how in clean segv abort forge forge-nonce; do
  record "hooked_$how" env ONDEVICE_REC=$how "$tmp/hooked" --duration=true
done

printf '#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN\n#include <doctest/doctest.h>\n' >"$tmp/own_main.cpp"
g++ "${flags[@]}" -c "$tmp/own_main.cpp" -o "$tmp/own_main.o"
g++ "$tmp"/{cases,listener,own_main,runtime}.o -o "$tmp/own_hooked"
record hooked_own_main_segv env ONDEVICE_REC=segv "$tmp/own_hooked" --duration=true
g++ "$tmp"/{cases,own_main,runtime}.o -o "$tmp/console"
for how in clean segv; do
  record "console_$how" env ONDEVICE_REC=$how "$tmp/console" --duration=true
done

arm=(aarch64-linux-gnu-g++ -mcpu=cortex-a53 -O2 -g -fno-exceptions -fno-rtti "-ffile-prefix-map=$out/=")
"${arm[@]}" -c cases.cpp -o "$tmp/a_cases.o"
"${arm[@]}" -c "$harness/doctest_listener.cpp" -o "$tmp/a_listener.o"
"${arm[@]}" -c "$harness/doctest_main.cpp" -o "$tmp/a_main.o"
aarch64-linux-gnu-gcc -O2 -c "$runtime" -o "$tmp/a_runtime.o"
aarch64-linux-gnu-g++ -static "$tmp"/a_{cases,listener,main,runtime}.o -o "$tmp/a_hooked"
record qemu_aarch64_hooked_segv env ONDEVICE_REC=segv qemu-aarch64 "$tmp/a_hooked" --duration=true
