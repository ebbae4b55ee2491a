/* Host runtime: the one function micro_test.h needs, on a hosted libc; stdout
 * line-buffered for every format; where a crash struck (crash_line.h) and, for Unity,
 * the crashing case's name. */
#define _GNU_SOURCE /* clock_gettime, sigaction, sigaltstack under -std=c11; REG_RIP */
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "crash_line.h"

static void write_all(const char *data, size_t len);

/* stdout line-buffered from before main, whatever the test's framework: a pipe would make
 * it fully buffered, and a binary that crashes would take the lines its harness had
 * printed (the verdicts of the cases before the crash) with it. Priority 101: before the
 * test's own constructors, which may print. */
static void unity_watch(void);
static void crash_watch(int unity);

__attribute__((constructor(101))) static void ondevice_line_buffered(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  unity_watch();
}

/* Unity prints a case's verdict line after the case ran and no start line, so a case that
 * printed its own PASS line and then crashed passed, and the crash went to the next case.
 * Unity keeps the running case's name in its global `Unity` (its second field since Unity
 * 2.0): when the binary links Unity, a crash and the exit print it stamped with a per-run
 * nonce (docs/protocol.md), so the crash is the case's that Unity was running, and a case
 * that printed the rest of the run and left has not finished it. */
struct ondevice_unity_head {
  const char *file;
  const char *current_test_name;
};
extern struct ondevice_unity_head Unity __attribute__((weak));
extern void UnityBegin(const char *filename) __attribute__((weak));

static char unity_nonce[17];
static char crash_altstack[65536]; /* the crash may be a stack overflow */

static size_t put(char *p, size_t at, size_t cap, const char *s) {
  while (*s && at < cap) p[at++] = *s == '\n' || *s == '\r' ? ' ' : *s, s++;
  return at;
}

/* "#ondevice NONCE what NAME": NAME is Unity's running case ("-" before the first) */
static void unity_mark(const char *what) {
  const char *name = Unity.current_test_name ? Unity.current_test_name : "-";
  char line[512];
  size_t n = 1;
  line[0] = '\n'; /* its own line, whatever the test printed last (put() blanks newlines) */
  n = put(line, n, sizeof line - 1, "#ondevice ");
  n = put(line, n, sizeof line - 1, unity_nonce);
  n = put(line, n, sizeof line - 1, what);
  n = put(line, n, sizeof line - 1, name);
  line[n++] = '\n';
  write_all(line, n);
}

static int crash_unity; /* the binary links Unity: a crash also names Unity's running case */

/* A fatal signal: Unity's running case, then where it struck (the unwind comes last: it
 * is the step that could fault again), then the default action, so the run still ends by
 * this signal ("killed by SIGSEGV"). */
static void crashed(int sig, siginfo_t *info, void *context) {
  static volatile sig_atomic_t first;
  (void)info;
  if (first) { /* the handler itself faulted: end by the signal that brought it here */
    signal(sig, SIG_DFL);
    raise(first);
    raise(sig);
  }
  first = sig;
  if (crash_unity) unity_mark(" crashed-in ");
  static char line[96 + 20 * ONDEVICE_CRASH_FRAMES];
  write_all(line, ondevice_crash_line(line, sig, context));
  raise(sig); /* SA_RESETHAND: the default action */
}

/* The closing line, from exit(): a test that leaves with _exit() has none, and one that
 * calls exit() is named by it (the runtime's constructor ran before the test's: this
 * handler runs after theirs). */
static void unity_exited(void) {
  fflush(stdout);
  unity_mark(" exit-in ");
}

static void unity_watch(void) {
  if (&Unity == NULL || UnityBegin == NULL) { /* not a Unity binary */
    crash_watch(0);
    return;
  }
  uint64_t x = 0;
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd >= 0) {
    if (read(fd, &x, sizeof x) != (ssize_t)sizeof x) x = 0;
    close(fd);
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  x ^= ((uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15u) ^ ((uint64_t)(uintptr_t)&x << 7);
  for (int i = 15; i >= 0; i--, x >>= 4) unity_nonce[i] = "0123456789abcdef"[x & 15];
  write_all("#ondevice nonce ", 16);
  write_all(unity_nonce, 16);
  write_all("\n", 1);
  atexit(unity_exited);
  crash_watch(1);
}

/* The handler for every fatal signal still at its default action (a sanitizer's or the
 * test's own stays; Unity's crash mark takes the signal in any case, as it always did). */
static void crash_watch(int unity) {
  crash_unity = unity;
  stack_t ss = {.ss_sp = crash_altstack, .ss_size = sizeof crash_altstack, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  struct sigaction sa = {.sa_sigaction = crashed, .sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK | SA_NODEFER};
  sigemptyset(&sa.sa_mask);
  const int crashes[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS};
  for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++) {
    struct sigaction old;
    if (unity || (sigaction(crashes[i], NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL))
      sigaction(crashes[i], &sa, NULL);
  }
}

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
