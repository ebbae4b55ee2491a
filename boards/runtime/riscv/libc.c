/* picolibc glue: stdout and exit() reach the board's output (our semihosting.c). */
#include <stddef.h>
#include <stdio.h>

void ondevice_write(const char *data, size_t len);
void ondevice_exit(int code) __attribute__((noreturn));

static char pending[128]; /* stdout is line-buffered: one output call per line */
static size_t used;
static int in_stdio_write;

void ondevice_watch_output(const char *data, size_t len) __attribute__((weak)); /* casewatch.c */

static void write_pending(void) {
  in_stdio_write = 1;
  ondevice_write(pending, used);
  if (ondevice_watch_output) ondevice_watch_output(pending, used);
  in_stdio_write = 0;
  used = 0;
}

/* Called by the output backend before the harness writes: what the test printed goes
 * first, and a harness line starts a line of its own. */
void ondevice_flush_stdio(void) {
  if (in_stdio_write || used == 0) return;
  int ends_line = pending[used - 1] == '\n';
  write_pending();
  if (!ends_line) {
    in_stdio_write = 1;
    ondevice_write("\n", 1);
    in_stdio_write = 0;
  }
}

static int put(char c, FILE *stream) {
  (void)stream;
  pending[used++] = c;
  if (c == '\n' || used == sizeof pending) write_pending();
  return (unsigned char)c;
}

static int flush(FILE *stream) {
  (void)stream;
  if (used) write_pending();
  return 0;
}

static FILE ondevice_stdio = FDEV_SETUP_STREAM(put, NULL, flush, _FDEV_SETUP_WRITE);
FILE *const stdin = &ondevice_stdio;
FILE *const stdout = &ondevice_stdio;
FILE *const stderr = &ondevice_stdio;

void ondevice_coverage_at_exit(void) __attribute__((weak)); /* coverage.c, in a covered build */

__attribute__((noreturn)) void _exit(int code) {
  if (ondevice_coverage_at_exit) ondevice_coverage_at_exit(); /* exit(): a normal end, never a fault's */
  ondevice_exit(code);
}
