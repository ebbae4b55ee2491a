#!/usr/bin/env bash
# Re-records the Catch2 transcripts test_catch2.py parses, from cases.cpp: built as
# pytest-ondevice builds it (our listener and main, formats/harness/catch2_*.cpp, and the host
# runtime) with Debian's Catch2 2.13 on the host and for aarch64 (the rpi board's flags, run
# under qemu-aarch64: -fno-exceptions, where a failed REQUIRE ends the binary); with Catch2's
# own main and signal handler (a source's CATCH_CONFIG_MAIN) with and without our listener;
# and, given CATCH2_V3=DIR holding Catch2 v3's amalgamated catch_amalgamated.{hpp,cpp} (not
# packaged by Debian), by v3's console reporter alone.
# ONDEVICE_REC picks how the case "ends the run" ends it: segv, abort, forge, forge-nonce.
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
g++ "${flags[@]}" -c "$harness/catch2_listener.cpp" -o "$tmp/listener.o"
g++ "${flags[@]}" -c "$harness/catch2_main.cpp" -o "$tmp/main.o"
gcc -O1 -c "$runtime" -o "$tmp/runtime.o"
g++ "$tmp"/{cases,listener,main,runtime}.o -o "$tmp/hooked"
for how in clean segv abort forge forge-nonce; do
  record "v2_hooked_$how" env ONDEVICE_REC=$how "$tmp/hooked" --durations yes
done

printf '#define CATCH_CONFIG_MAIN\n#include <catch2/catch.hpp>\n' >"$tmp/own_main.cpp"
g++ "${flags[@]}" -c "$tmp/own_main.cpp" -o "$tmp/own_main.o"
g++ "$tmp"/{cases,listener,own_main,runtime}.o -o "$tmp/own_hooked"
record v2_hooked_own_main_segv env ONDEVICE_REC=segv "$tmp/own_hooked" --durations yes
g++ "$tmp"/{cases,own_main,runtime}.o -o "$tmp/console"
for how in clean segv; do
  record "v2_console_$how" env ONDEVICE_REC=$how "$tmp/console" --durations yes
done

arm=(aarch64-linux-gnu-g++ -mcpu=cortex-a53 -O2 -g -fno-exceptions -fno-rtti "-ffile-prefix-map=$out/=")
"${arm[@]}" -c cases.cpp -o "$tmp/a_cases.o"
"${arm[@]}" -c "$harness/catch2_listener.cpp" -o "$tmp/a_listener.o"
"${arm[@]}" -c "$harness/catch2_main.cpp" -o "$tmp/a_main.o"
aarch64-linux-gnu-gcc -O2 -c "$runtime" -o "$tmp/a_runtime.o"
aarch64-linux-gnu-g++ -static "$tmp"/a_{cases,listener,main,runtime}.o -o "$tmp/a_hooked"
record qemu_aarch64_hooked qemu-aarch64 "$tmp/a_hooked" --durations yes

if [ -n "${CATCH2_V3:-}" ]; then
  mkdir -p "$tmp/v3/catch2"
  echo '#include "catch_amalgamated.hpp"' >"$tmp/v3/catch2/catch.hpp"
  g++ "${flags[@]}" -I"$CATCH2_V3" -I"$tmp/v3" cases.cpp "$CATCH2_V3/catch_amalgamated.cpp" "$tmp/runtime.o" -o "$tmp/v3_console"
  for how in clean segv; do
    record "v3_console_$how" env ONDEVICE_REC=$how "$tmp/v3_console" --durations yes
  done
  grep -a -m1 -o 'Catch2 v[0-9.]*' "$out/v3_console_clean.txt" >"$out/v3.version"
fi
