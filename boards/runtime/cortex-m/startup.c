/* Reset handler: memory init, FPU, fault handlers, C++ constructors, main, exit. */
#include <stdint.h>

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss;
extern void (*__preinit_array_start[])(void) __attribute__((weak));
extern void (*__preinit_array_end[])(void) __attribute__((weak));
extern void (*__init_array_start[])(void) __attribute__((weak));
extern void (*__init_array_end[])(void) __attribute__((weak));

int main(int argc, char **argv);
void ondevice_exit(int code) __attribute__((noreturn));
void ondevice_coverage_at_exit(void) __attribute__((weak)); /* coverage.c, in a covered build */

#define SCB_SHCSR (*(volatile uint32_t *)0xE000ED24)
#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88)

/* What C++ needs without the standard start files (-nostartfiles). */
__attribute__((weak)) void *__dso_handle = 0;
__attribute__((weak)) void _init(void) {}
__attribute__((weak)) void _fini(void) {}

__attribute__((weak)) void ondevice_board_init(void) {}

__attribute__((weak, noreturn)) void Reset_Handler(void) {
  uint32_t *src = &_sidata, *dst = &_sdata;
  while (dst < &_edata) *dst++ = *src++;
  for (dst = &_sbss; dst < &_ebss;) *dst++ = 0;
#if defined(__ARM_FP) || defined(__VFP_FP__) && !defined(__SOFTFP__)
  SCB_CPACR |= (0xFu << 20); /* CP10 and CP11: full access to the FPU */
  __asm__ volatile("dsb\n isb");
#endif
  /* MemManage, BusFault and UsageFault get their own handlers (and names) */
  SCB_SHCSR |= (1u << 16) | (1u << 17) | (1u << 18);
  ondevice_board_init();
  for (void (**f)(void) = __preinit_array_start; f < __preinit_array_end; ++f) (*f)();
  for (void (**f)(void) = __init_array_start; f < __init_array_end; ++f) (*f)();
  int code = main(0, 0);
  if (ondevice_coverage_at_exit) ondevice_coverage_at_exit(); /* a normal exit: never after a fault */
  ondevice_exit(code);
}
