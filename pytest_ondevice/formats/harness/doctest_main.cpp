// doctest's implementation and usual main, linked by pytest-ondevice when a test source has
// none (no DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN or DOCTEST_CONFIG_IMPLEMENT, no main of its
// own). doctest's own signal handlers are left out: a crash then ends the binary by its
// signal with the host runtime's word on where it struck, charged to the running case by
// our listener's lines.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#define DOCTEST_CONFIG_NO_POSIX_SIGNALS
#include <doctest/doctest.h>
