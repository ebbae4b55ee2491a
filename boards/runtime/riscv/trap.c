/* Machine-mode traps: print which exception, where (mepc) and what (mtval) as an
 * "#ondevice fault" line, then exit non-zero, so a fault is a failure that names itself,
 * never a hang. Installed before main by a constructor (picolibc's crt0 runs them). */
#include <stddef.h>
#include <stdint.h>

#include "../common/fault_line.h"

void ondevice_write(const char *data, size_t len);
void ondevice_exit(int code) __attribute__((noreturn));

#define CSR_READ(name)                                                                 \
  ({                                                                                   \
    uint32_t v_;                                                                       \
    __asm__ volatile(".option push\n .option arch, +zicsr\n csrr %0, " #name "\n .option pop" \
                     : "=r"(v_));                                                      \
    v_;                                                                                \
  })

static const char *const causes[] = {
    "InstructionAddressMisaligned", "InstructionAccessFault", "IllegalInstruction", "Breakpoint",
    "LoadAddressMisaligned",        "LoadAccessFault",        "StoreAddressMisaligned", "StoreAccessFault",
    "EcallFromU",                   "EcallFromS",             "Reserved10",             "EcallFromM",
    "InstructionPageFault",         "LoadPageFault",          "Reserved14",             "StorePageFault",
};

__attribute__((used)) void ondevice_trap(void) {
  uint32_t mcause = CSR_READ(mcause), mepc = CSR_READ(mepc), mtval = CSR_READ(mtval);
  char line[240];
  char *p = put_str(line, "\n#ondevice fault ");
  uint32_t code = mcause & 0x7FFFFFFFu;
  if (mcause & 0x80000000u)
    p = put_str(p, "Interrupt");
  else
    p = put_str(p, code < sizeof causes / sizeof causes[0] ? causes[code] : "Exception");
  p = put_str(p, " pc=");
  p = put_hex(p, mepc);
  p = put_str(p, " mcause=");
  p = put_hex(p, mcause);
  p = put_str(p, " mtval=");
  p = put_hex(p, mtval);
  p = put_unity_case(p, 64);
  *p++ = '\n';
  ondevice_write(line, (size_t)(p - line));
  ondevice_exit(ONDEVICE_FAULT_EXIT);
}

/* mtvec needs a 4-byte aligned, direct-mode entry; the trap never returns, so nothing
 * is saved: a stack that is itself the cause gets a fresh one below the top of RAM. */
__attribute__((naked, aligned(4))) void ondevice_trap_entry(void) {
  __asm__ volatile("la sp, __stack\n j ondevice_trap");
}

__attribute__((constructor(101))) static void ondevice_trap_install(void) {
  __asm__ volatile(".option push\n .option arch, +zicsr\n csrw mtvec, %0\n .option pop" : : "r"(ondevice_trap_entry));
}
