/* Output and exit through semihosting (QEMU, Renode, a debugger such as pyOCD), on Arm
 * (bkpt 0xab) and on RISC-V (the ebreak sequence the RISC-V semihosting spec names). */
#include <stddef.h>
#include <stdint.h>

#define SYS_WRITE0 0x04
#define SYS_EXIT 0x18
#define SYS_EXIT_EXTENDED 0x20
#define ADP_STOPPED_APPLICATION_EXIT 0x20026

#if defined(__riscv)
/* The sequence is uncompressed and within one 16-byte block (a function of its own: an
 * alignment inside a function defeats the linker's relaxation), so a debugger reading
 * around the ebreak sees all of it. Arguments and result in a0/a1, as for a call. */
__attribute__((naked, noinline, aligned(16))) static int semihost(int op, const void *arg) {
  (void)op;
  (void)arg;
  __asm__ volatile(".option push\n .option norvc\n slli x0, x0, 0x1f\n ebreak\n srai x0, x0, 7\n ret\n"
                   ".option pop");
}
#else
static inline int semihost(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}
#endif

void ondevice_flush_stdio(void) __attribute__((weak)); /* syscalls.c, when linked */

__attribute__((weak)) void ondevice_write(const char *data, size_t len) {
  if (ondevice_flush_stdio) ondevice_flush_stdio();
  char chunk[65];
  while (len > 0) {
    size_t n = len < 64 ? len : 64;
    for (size_t i = 0; i < n; ++i) chunk[i] = data[i];
    chunk[n] = '\0';
    semihost(SYS_WRITE0, chunk);
    data += n;
    len -= n;
  }
}

/* "#ondevice exit N": the exit status in the output itself, for hosts that see only the
 * output (Renode halts the CPU at a semihosting exit and reports no status; a UART). */
void ondevice_report_exit(int code) {
  char line[32] = "\n#ondevice exit ";
  size_t n = 16;
  unsigned int v = code < 0 ? 0u - (unsigned int)code : (unsigned int)code;
  char digits[11];
  size_t d = 0;
  do {
    digits[d++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  if (code < 0) line[n++] = '-';
  while (d > 0) line[n++] = digits[--d];
  line[n++] = '\n';
  ondevice_write(line, n);
}

/* SYS_EXIT_EXTENDED carries the exit code to the host (QEMU's exit status). */
void ondevice_output_drain(void) __attribute__((weak)); /* rtt.c, when linked */

__attribute__((weak, noreturn)) void ondevice_exit(int code) {
  ondevice_report_exit(code);
  if (ondevice_output_drain) ondevice_output_drain(); /* the host reads the last line before the exit */
  uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
  semihost(SYS_EXIT_EXTENDED, block);
  semihost(SYS_EXIT, (const void *)(uintptr_t)ADP_STOPPED_APPLICATION_EXIT);
  for (;;) {
  }
}
