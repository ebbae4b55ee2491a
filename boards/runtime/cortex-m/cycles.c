/* Bench cycle source for Cortex-M (ONDEVICE_BENCH in micro_test.h).
 * Default: SysTick at the processor clock, 24-bit, counting down (we return it counting
 * up). On QEMU, whose DWT CYCCNT reads 0, SysTick runs on the -icount clock, so figures
 * are identical run to run (the host converts ticks to instructions from the board file).
 * -DONDEVICE_CYCLES_DWT: the DWT cycle counter (32-bit) of real M3/M4 silicon. */
#include <stdint.h>

#define REG(addr) (*(volatile uint32_t *)(addr))

#ifdef ONDEVICE_CYCLES_DWT
#define DEMCR REG(0xE000EDFCu)
#define DWT_CTRL REG(0xE0001000u)
#define DWT_CYCCNT REG(0xE0001004u)
__attribute__((weak)) const uint64_t ondevice_cycles_mask = 0xFFFFFFFFu;
__attribute__((weak)) const char ondevice_cycles_unit[] = "dwt";

__attribute__((weak)) void ondevice_cycles_init(void) {
  DEMCR |= 1u << 24; /* TRCENA */
  DWT_CTRL |= 1u;    /* CYCCNTENA */
}

__attribute__((weak)) uint64_t ondevice_cycles(void) { return DWT_CYCCNT; }
#else
#define SYST_CSR REG(0xE000E010u)
#define SYST_RVR REG(0xE000E014u)
#define SYST_CVR REG(0xE000E018u)
__attribute__((weak)) const uint64_t ondevice_cycles_mask = 0xFFFFFFu;
__attribute__((weak)) const char ondevice_cycles_unit[] = "systick";

__attribute__((weak)) void ondevice_cycles_init(void) {
  if ((SYST_CSR & 1u) == 0 || SYST_RVR != 0xFFFFFFu) {
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0; /* the next read may still return 0: the calibration run absorbs it */
    SYST_CSR = 5u; /* enable, processor clock, no interrupt */
  }
}

__attribute__((weak)) uint64_t ondevice_cycles(void) { return 0xFFFFFFu - (SYST_CVR & 0xFFFFFFu); }
#endif
