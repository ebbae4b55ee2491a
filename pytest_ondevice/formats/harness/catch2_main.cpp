// Catch2's usual main, linked by pytest-ondevice when a test source has none (no
// CATCH_CONFIG_MAIN or CATCH_CONFIG_RUNNER, no main of its own). Catch2's own signal
// handlers are left out: a crash then ends the binary by its signal with the host
// runtime's word on where it struck, charged to the running case by our listener's lines.
#define CATCH_CONFIG_MAIN
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#include <catch2/catch.hpp>
