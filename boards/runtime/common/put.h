/* Text without printf, for the runtime's own lines: a fault handler cannot trust stdio,
 * and the coverage dump and stack watch run inside the program's own output calls. */
#ifndef ONDEVICE_PUT_H
#define ONDEVICE_PUT_H
#include <stdint.h>

static inline __attribute__((unused)) char *put_str(char *p, const char *s) {
  while (*s) *p++ = *s++;
  return p;
}

static inline __attribute__((unused)) char *put_digits(char *p, uint32_t v, int digits) { /* hex */
  for (int i = digits - 1; i >= 0; --i) *p++ = "0123456789abcdef"[(v >> (i * 4)) & 0xF];
  return p;
}

static inline __attribute__((unused)) char *put_hex(char *p, uint32_t v) {
  *p++ = '0';
  *p++ = 'x';
  return put_digits(p, v, 8);
}

static inline __attribute__((unused)) char *put_dec(char *p, unsigned long v) {
  char digits[20];
  int d = 0;
  do {
    digits[d++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (d) *p++ = digits[--d];
  return p;
}
#endif
