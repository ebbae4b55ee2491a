/* Building an "#ondevice fault" line without printf: a fault handler cannot trust the
 * heap or stdio. Shared by every arch's fault handler. */
#ifndef ONDEVICE_FAULT_LINE_H
#define ONDEVICE_FAULT_LINE_H
#include <stdint.h>

#define ONDEVICE_FAULT_EXIT 3 /* the exit status of a fault, on every arch */

static char *put_str(char *p, const char *s) {
  while (*s) *p++ = *s++;
  return p;
}

static char *put_hex(char *p, uint32_t v) {
  *p++ = '0';
  *p++ = 'x';
  for (int i = 7; i >= 0; --i) *p++ = "0123456789abcdef"[(v >> (i * 4)) & 0xF];
  return p;
}
#endif
