/* Cortex-M vector table. Every handler is weak: a project can supply its own. */
#include <stdint.h>

extern uint32_t _estack;
void Reset_Handler(void);
void ondevice_default_handler(void);
void HardFault_Handler(void);
void MemManage_Handler(void);
void BusFault_Handler(void);
void UsageFault_Handler(void);

/* Unused exceptions branch (keeping LR and the stack as they are) to the fault reporter. */
#define DEFAULT_HANDLER(name) \
  __attribute__((naked, weak)) void name(void) { __asm__ volatile("b ondevice_default_handler"); }
DEFAULT_HANDLER(NMI_Handler)
DEFAULT_HANDLER(SVC_Handler)
DEFAULT_HANDLER(DebugMon_Handler)
DEFAULT_HANDLER(PendSV_Handler)
DEFAULT_HANDLER(SysTick_Handler)
DEFAULT_HANDLER(ondevice_irq_handler)

__attribute__((section(".isr_vector"), used)) void (*const ondevice_vectors[16 + 64])(void) = {
    (void (*)(void))(&_estack),
    Reset_Handler,
    NMI_Handler,
    HardFault_Handler,
    MemManage_Handler,
    BusFault_Handler,
    UsageFault_Handler,
    0, 0, 0, 0,
    SVC_Handler,
    DebugMon_Handler,
    0,
    PendSV_Handler,
    SysTick_Handler,
    /* external interrupts: none are enabled by the runtime */
    [16 ... 16 + 63] = ondevice_irq_handler,
};
