/* Output through an STM32 USART (F1/F2/F4 register layout), polled, for real boards.
 * Put this file in a board's toolchain.runtime in place of (or beside) semihosting.c:
 * its ondevice_write wins over semihosting's weak one, while semihosting.c may still
 * provide the exit when a debugger or emulator is attached.
 *   -DONDEVICE_UART_BASE=0x40013800   USART1 (the default)
 *   -DONDEVICE_UART_STM32F1_INIT      also clock the USART and route PA9 (a real Blue Pill)
 *   -DONDEVICE_UART_CLOCK_HZ / -DONDEVICE_UART_BAUD   for the baud divider
 *   -DONDEVICE_UART_DRAIN_SPINS=N   spin after the last line before the exit (an emulator whose
 *                                   UART is a pty exits at once, and the host loses what it
 *                                   has not read yet; 0 on hardware: the adapter stays) */
#include <stddef.h>
#include <stdint.h>

#ifndef ONDEVICE_UART_BASE
#define ONDEVICE_UART_BASE 0x40013800u
#endif
#ifndef ONDEVICE_UART_CLOCK_HZ
#define ONDEVICE_UART_CLOCK_HZ 72000000u
#endif
#ifndef ONDEVICE_UART_BAUD
#define ONDEVICE_UART_BAUD 115200u
#endif
#ifndef ONDEVICE_UART_DRAIN_SPINS
#define ONDEVICE_UART_DRAIN_SPINS 0u
#endif

#define REG(addr) (*(volatile uint32_t *)(addr))
#define USART_SR REG(ONDEVICE_UART_BASE + 0x00)
#define USART_DR REG(ONDEVICE_UART_BASE + 0x04)
#define USART_BRR REG(ONDEVICE_UART_BASE + 0x08)
#define USART_CR1 REG(ONDEVICE_UART_BASE + 0x0C)
#define SR_TXE (1u << 7)
#define SR_TC (1u << 6)
#define SR_RXNE (1u << 5)

static int uart_ready;

static void uart_init(void) {
#ifdef ONDEVICE_UART_STM32F1_INIT
  REG(0x40021018) |= (1u << 14) | (1u << 2); /* RCC_APB2ENR: USART1EN, IOPAEN */
  REG(0x40010804) = (REG(0x40010804) & ~(0xFu << 4)) | (0xBu << 4); /* GPIOA_CRH: PA9 AF push-pull */
  USART_BRR = (ONDEVICE_UART_CLOCK_HZ + ONDEVICE_UART_BAUD / 2) / ONDEVICE_UART_BAUD;
#endif
  USART_CR1 = (1u << 13) | (1u << 3) | (1u << 2); /* UE | TE | RE */
  uart_ready = 1;
}

void ondevice_flush_stdio(void) __attribute__((weak)); /* syscalls.c, when linked */

void ondevice_write(const char *data, size_t len) {
  if (ondevice_flush_stdio) ondevice_flush_stdio();
  if (!uart_ready) uart_init();
  while (len--) {
    while (!(USART_SR & SR_TXE)) {
    }
    USART_DR = (uint32_t)(unsigned char)*data++;
  }
  while (!(USART_SR & SR_TC)) {
  }
}

__attribute__((weak)) void ondevice_output_drain(void) {
  for (volatile uint32_t spins = 0; spins < ONDEVICE_UART_DRAIN_SPINS; ++spins) {
  }
}

/* Input from the same USART (device.console in a scripted test), polled: one byte, blocking. */
int ondevice_read(char *buf, size_t len) {
  if (len == 0) return 0;
  if (!uart_ready) uart_init();
  while (!(USART_SR & SR_RXNE)) {
  }
  buf[0] = (char)USART_DR;
  return 1;
}
