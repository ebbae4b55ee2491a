/* Output through SEGGER RTT: a ring buffer in RAM that the debug probe reads while the core
 * runs (no UART pins, no halt per line as with semihosting). Put this file in a board's
 * toolchain.runtime beside semihosting.c: its ondevice_write wins over semihosting's weak
 * one, while semihosting.c still ends the program for the debugger. The host finds the
 * control block by its symbol, _SEGGER_RTT, in the ELF.
 *   -DONDEVICE_RTT_SIZE=1024   the up-buffer's size
 * The layout is SEGGER's (SEGGER_RTT.h): one up-buffer, one (unused) down-buffer. A full
 * buffer blocks the writer until the host has read: no output is dropped. */
#include <stddef.h>
#include <stdint.h>

#ifndef ONDEVICE_RTT_SIZE
#define ONDEVICE_RTT_SIZE 1024u
#endif

typedef struct {
  const char *name;
  char *buffer;
  uint32_t size;
  volatile uint32_t wr_off; /* written by the target */
  volatile uint32_t rd_off; /* written by the host */
  uint32_t flags;
} rtt_buffer;

typedef struct {
  char id[16];
  int32_t max_up;
  int32_t max_down;
  rtt_buffer up[1];
  rtt_buffer down[1];
} rtt_control_block;

rtt_control_block _SEGGER_RTT __attribute__((used));
static char up_buffer[ONDEVICE_RTT_SIZE];
static char down_buffer[16];

void ondevice_flush_stdio(void) __attribute__((weak)); /* syscalls.c, when linked */

static void rtt_init(void) {
  static const char id[] = "SEGGER RTT";
  _SEGGER_RTT.max_up = 1;
  _SEGGER_RTT.max_down = 1;
  _SEGGER_RTT.up[0] = (rtt_buffer){"Terminal", up_buffer, sizeof up_buffer, 0, 0, 2 /* block if full */};
  _SEGGER_RTT.down[0] = (rtt_buffer){"Terminal", down_buffer, sizeof down_buffer, 0, 0, 0};
  /* the id last (in reverse, as SEGGER does): a host never finds a half-made block */
  for (int i = (int)sizeof id - 1; i >= 0; --i) ((volatile char *)_SEGGER_RTT.id)[i] = id[i];
}

void ondevice_write(const char *data, size_t len) {
  if (ondevice_flush_stdio) ondevice_flush_stdio();
  if (_SEGGER_RTT.id[0] != 'S') rtt_init();
  rtt_buffer *up = &_SEGGER_RTT.up[0];
  while (len > 0) {
    uint32_t wr = up->wr_off;
    uint32_t next = (wr + 1u) % up->size;
    if (next == up->rd_off) continue; /* full: wait for the host */
    up->buffer[wr] = *data++;
    __asm__ volatile("dmb" ::: "memory"); /* the byte before the offset that publishes it */
    up->wr_off = next;
    --len;
  }
}

/* Before the program ends: wait (bounded, in case no host reads) until the host has read
 * everything, so the exit line is not lost when the debugger or emulator stops the core. */
void ondevice_output_drain(void) {
  rtt_buffer *up = &_SEGGER_RTT.up[0];
  for (volatile uint32_t spins = 0; spins < 20000000u && up->rd_off != up->wr_off; ++spins) {
  }
}
