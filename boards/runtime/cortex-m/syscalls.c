/* newlib system calls, so printf/puts and exit() reach the board's output. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

void ondevice_write(const char *data, size_t len);
void ondevice_exit(int code) __attribute__((noreturn));

extern char end;          /* first free byte after .bss (linker script) */
extern char __HeapLimit;  /* bottom of the reserved stack */

#pragma weak fflush /* linked only when the program uses stdio: nothing to flush otherwise */
static int in_stdio_write;

/* Called by the output backends before the harness writes: what the test printed through
 * stdio (newlib buffers stdout) goes first, so the board's output is one stream in program
 * order, and a harness line starts a line of its own. Writes that come from stdio itself
 * never flush again. */
void ondevice_flush_stdio(void) {
  if (in_stdio_write || !fflush || stdout->_p == NULL || stdout->_p == stdout->_bf._base) return;
  int ends_line = stdout->_p[-1] == '\n';
  in_stdio_write = 1;
  fflush(stdout);
  if (!ends_line) ondevice_write("\n", 1); /* a harness line starts a line of its own */
  in_stdio_write = 0;
}

void ondevice_watch_output(const char *data, size_t len) __attribute__((weak)); /* casewatch.c */

__attribute__((weak)) int _write(int fd, const char *buf, int len) {
  if (fd != 1 && fd != 2) {
    errno = EBADF;
    return -1;
  }
  in_stdio_write++;
  ondevice_write(buf, (size_t)len);
  if (ondevice_watch_output) ondevice_watch_output(buf, (size_t)len);
  in_stdio_write--;
  return len;
}

__attribute__((weak)) void *_sbrk(ptrdiff_t incr) {
  static char *brk = &end;
  char *prev = brk;
  if (brk + incr > &__HeapLimit) {
    errno = ENOMEM;
    return (void *)-1;
  }
  brk += incr;
  return prev;
}

void ondevice_coverage_at_exit(void) __attribute__((weak)); /* coverage.c, in a covered build */

__attribute__((weak, noreturn)) void _exit(int code) {
  if (ondevice_coverage_at_exit) ondevice_coverage_at_exit(); /* exit(): a normal end, never a fault's */
  ondevice_exit(code);
}
__attribute__((weak)) int _close(int fd) { (void)fd; return -1; }
/* No file system: a program that can open a file (fopen) links, and the open fails, as a test
 * that reads files is told on bare metal. */
__attribute__((weak)) int _open(const char *path, int flags, ...) {
  (void)flags;
  static const char said[] = "ondevice: no file system on bare metal: cannot open ";
  ondevice_flush_stdio();
  ondevice_write(said, sizeof said - 1);
  size_t n = 0;
  while (path && path[n] && n < 200) n++;
  ondevice_write(path ? path : "(null)", path ? n : 6);
  ondevice_write("\n", 1);
  errno = ENOSYS;
  return -1;
}
int ondevice_read(char *buf, size_t len) __attribute__((weak)); /* semihosting.c or a UART's */
__attribute__((weak)) int _read(int fd, char *buf, int len) {
  if (fd != 0 || len <= 0 || !ondevice_read) return 0;
  int n = ondevice_read(buf, (size_t)len);
  return n < 0 ? 0 : n; /* stdin: getchar() and fgets() read the console */
}
__attribute__((weak)) int _lseek(int fd, int off, int whence) { (void)fd; (void)off; (void)whence; return 0; }
__attribute__((weak)) int _isatty(int fd) { return fd <= 2; }
__attribute__((weak)) int _fstat(int fd, struct stat *st) {
  (void)fd;
  st->st_mode = S_IFCHR;
  return 0;
}
__attribute__((weak)) int _getpid(void) { return 1; }
__attribute__((weak)) int _kill(int pid, int sig) {
  (void)pid;
  (void)sig;
  errno = EINVAL;
  return -1;
}
