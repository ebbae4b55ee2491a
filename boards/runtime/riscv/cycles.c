/* Bench cycle source for RISC-V (ONDEVICE_BENCH in micro_test.h): the `cycle` CSR,
 * 64-bit through cycleh. Under QEMU's -icount it advances with virtual time, so figures
 * are identical run to run (the host turns them into instructions from the board file). */
#include <stdint.h>

__attribute__((weak)) const uint64_t ondevice_cycles_mask = ~(uint64_t)0;
__attribute__((weak)) const char ondevice_cycles_unit[] = "mcycle";

__attribute__((weak)) void ondevice_cycles_init(void) {}

__attribute__((weak)) uint64_t ondevice_cycles(void) {
  uint32_t hi, lo, again;
  do {
    __asm__ volatile(".option push\n .option arch, +zicsr\n csrr %0, cycleh\n csrr %1, cycle\n csrr %2, cycleh\n"
                     " .option pop"
                     : "=r"(hi), "=r"(lo), "=r"(again));
  } while (hi != again);
  return ((uint64_t)hi << 32) | lo;
}
