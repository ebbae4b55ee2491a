/* Host runtime: the one function micro_test.h needs, on a hosted libc. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <time.h>
#include <unistd.h>

static void write_all(const char *data, size_t len);

/* stdout line-buffered from before main, whatever the test's framework: a pipe would make
 * it fully buffered, and a binary that crashes would take the lines its harness had
 * printed (the verdicts of the cases before the crash) with it. Priority 101: before the
 * test's own constructors, which may print. */
__attribute__((constructor(101))) static void ondevice_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

/* What the test printed through stdio (buffered when stdout is a pipe) goes first, so the
 * output is one stream in program order; a harness line starts on a line of its own even
 * when the test's last print had no newline. */
static void flush_stdio(void) {
  size_t pending = __fpending(stdout);
  if (pending == 0) return;
#ifdef __GLIBC__
  int ends_line = stdout->_IO_write_ptr[-1] == '\n';
#else
  int ends_line = 0; /* the last byte cannot be seen: a blank line at worst */
#endif
  fflush(stdout);
  if (!ends_line) write_all("\n", 1);
}

void ondevice_write(const char *data, size_t len) {
  flush_stdio();
  write_all(data, len);
}

static void write_all(const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(1, data, len);
    if (n <= 0) return;
    data += n;
    len -= (size_t)n;
  }
}

/* Bench cycle source on a hosted system: CLOCK_MONOTONIC in ns. */
const uint64_t ondevice_cycles_mask = ~(uint64_t)0;
const char ondevice_cycles_unit[] = "ns";

void ondevice_cycles_init(void) {}

uint64_t ondevice_cycles(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
