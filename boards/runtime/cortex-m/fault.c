/* Fault handlers: print which fault, where (the stacked PC) and the fault
 * status registers as an "#ondevice fault" line, then exit non-zero, so a fault is
 * a failure that names itself, never a hang. */
#include <stddef.h>
#include <stdint.h>

#include "../common/fault_line.h"

void ondevice_write(const char *data, size_t len);
void ondevice_exit(int code) __attribute__((noreturn));
extern uint32_t ondevice_stack_bottom[] __attribute__((weak)); /* the linker script's */

#define SCB_CFSR (*(volatile uint32_t *)0xE000ED28)
#define SCB_HFSR (*(volatile uint32_t *)0xE000ED2C)
#define SCB_MMFAR (*(volatile uint32_t *)0xE000ED34)
#define SCB_BFAR (*(volatile uint32_t *)0xE000ED38)

static const char *cfsr_reason(uint32_t cfsr, uint32_t hfsr) {
  if (cfsr & (1u << 16)) return "UNDEFINSTR";
  if (cfsr & (1u << 17)) return "INVSTATE";
  if (cfsr & (1u << 18)) return "INVPC";
  if (cfsr & (1u << 19)) return "NOCP";
  if (cfsr & (1u << 24)) return "UNALIGNED";
  if (cfsr & (1u << 25)) return "DIVBYZERO";
  if (cfsr & (1u << 9)) return "PRECISERR";
  if (cfsr & (1u << 10)) return "IMPRECISERR";
  if (cfsr & (1u << 12)) return "STKERR";
  if (cfsr & (1u << 8)) return "IBUSERR";
  if (cfsr & (1u << 0)) return "IACCVIOL";
  if (cfsr & (1u << 1)) return "DACCVIOL";
  if (hfsr & (1u << 1)) return "VECTTBL";
  return "";
}

/* frame: r0 r1 r2 r3 r12 lr pc xpsr, as the CPU stacked them */
__attribute__((used, noreturn)) void ondevice_fault_report(const uint32_t *frame, const char *name) {
  char line[360], *p = line;
  uint32_t cfsr = SCB_CFSR, hfsr = SCB_HFSR;
  const char *why = cfsr_reason(cfsr, hfsr);
  p = put_str(p, "\r\n#ondevice fault ");
  p = put_str(p, name);
  if (*why) {
    p = put_str(p, " (");
    p = put_str(p, why);
    p = put_str(p, ")");
  }
  p = put_str(p, " pc=");
  p = put_hex(p, frame[6]);
  p = put_str(p, " lr=");
  p = put_hex(p, frame[5]);
  p = put_str(p, " CFSR=");
  p = put_hex(p, cfsr);
  p = put_str(p, " HFSR=");
  p = put_hex(p, hfsr);
  if (cfsr & (1u << 15)) {
    p = put_str(p, " BFAR=");
    p = put_hex(p, SCB_BFAR);
  }
  if (cfsr & (1u << 7)) {
    p = put_str(p, " MMFAR=");
    p = put_hex(p, SCB_MMFAR);
  }
  if (ondevice_stack_bottom && (uintptr_t)frame < (uintptr_t)ondevice_stack_bottom) {
    p = put_str(p, " STACK OVERFLOW sp=");  /* the frame went below the stack's bottom */
    p = put_hex(p, (uint32_t)(uintptr_t)frame);
    p = put_str(p, " bottom=");
    p = put_hex(p, (uint32_t)(uintptr_t)ondevice_stack_bottom);
  }
  p = put_unity_case(p, 64);
  p = put_str(p, "\r\n");
  ondevice_write(line, (size_t)(p - line));
  ondevice_exit(ONDEVICE_FAULT_EXIT);
}

/* Each handler picks the stack the CPU pushed the frame on (EXC_RETURN bit 2). */
__attribute__((used)) static const char hardfault_name[] = "HardFault";
__attribute__((used)) static const char memmanage_name[] = "MemManage";
__attribute__((used)) static const char busfault_name[] = "BusFault";
__attribute__((used)) static const char usagefault_name[] = "UsageFault";
__attribute__((used)) static const char unexpected_name[] = "unexpected exception";

__attribute__((naked, weak)) void HardFault_Handler(void) {
  __asm__ volatile("tst lr, #4\n ite eq\n mrseq r0, msp\n mrsne r0, psp\n"
                   "ldr r1, =hardfault_name\n b ondevice_fault_report\n");
}
__attribute__((naked, weak)) void MemManage_Handler(void) {
  __asm__ volatile("tst lr, #4\n ite eq\n mrseq r0, msp\n mrsne r0, psp\n"
                   "ldr r1, =memmanage_name\n b ondevice_fault_report\n");
}
__attribute__((naked, weak)) void BusFault_Handler(void) {
  __asm__ volatile("tst lr, #4\n ite eq\n mrseq r0, msp\n mrsne r0, psp\n"
                   "ldr r1, =busfault_name\n b ondevice_fault_report\n");
}
__attribute__((naked, weak)) void UsageFault_Handler(void) {
  __asm__ volatile("tst lr, #4\n ite eq\n mrseq r0, msp\n mrsne r0, psp\n"
                   "ldr r1, =usagefault_name\n b ondevice_fault_report\n");
}
__attribute__((naked)) void ondevice_default_handler(void) {
  __asm__ volatile("tst lr, #4\n ite eq\n mrseq r0, msp\n mrsne r0, psp\n"
                   "ldr r1, =unexpected_name\n b ondevice_fault_report\n");
}
