/* Stack high-water per case for a harness that prints GoogleTest's case lines but none of
 * our markers: TFLM's own micro_test_v2.h, which a TFLM tree compiles instead of ours.
 *
 * Every line the program prints passes through here on its way out (_write calls
 * ondevice_watch_output). "[ RUN      ] NAME" paints the stack below the printing frame
 * with a pattern; the case's verdict line ("[       OK ] NAME", "[  FAILED  ] NAME",
 * "[  SKIPPED ] NAME") finds the deepest word no longer painted and prints
 *
 *   #ondevice stack NAME BYTES [overflow]
 *
 * BYTES counts from the top of the stack: main's and the runner's frames and the printing
 * of the case's own lines are in it, so it never says less than the case used. "overflow":
 * the case reached the last ONDEVICE_STACK_GUARD bytes of the stack. Our micro_test.h
 * marks its cases itself, more precisely, and turns this off (ondevice_cases_marked). */
#include <stddef.h>
#include <stdint.h>

#include "put.h"

void ondevice_write(const char *data, size_t len);
extern uint32_t ondevice_stack_bottom[] __attribute__((weak)); /* the linker script's */
extern uint32_t ondevice_stack_top[] __attribute__((weak));

#define PATTERN 0x5AA5C33Cu
#define GUARD 256
#define NAME_MAX_CHARS 160

int ondevice_cases_marked; /* set by micro_test.h: its own markers measure each case */

static char line[NAME_MAX_CHARS + 16];
static size_t line_len;
static char running[NAME_MAX_CHARS + 1];
static uintptr_t painted_low, painted_top;

static int starts(const char *text, const char *prefix) {
  while (*prefix)
    if (*text++ != *prefix++) return 0;
  return 1;
}

__attribute__((noinline)) static void paint(void) {
  volatile uint32_t here = 0;
  uintptr_t top = ((uintptr_t)&here - 64) & ~(uintptr_t)3; /* below this frame, with room for its calls */
  uintptr_t low = ((uintptr_t)ondevice_stack_bottom + 3) & ~(uintptr_t)3;
  painted_low = painted_top = 0;
  if (top <= low) return;
  for (volatile uint32_t *p = (volatile uint32_t *)low; (uintptr_t)p < top; ++p) *p = PATTERN;
  painted_low = low;
  painted_top = top;
}

static void take(void) {
  const volatile uint32_t *word = (const volatile uint32_t *)painted_low;
  while ((uintptr_t)word < painted_top && *word == PATTERN) ++word;
  uintptr_t deepest = (uintptr_t)word < painted_top ? (uintptr_t)word : painted_top;
  char out[NAME_MAX_CHARS + 64];
  char *p = put_str(put_str(out, "#ondevice stack "), running);
  p = put_dec(put_str(p, " "), (unsigned long)((uintptr_t)ondevice_stack_top - deepest));
  if (deepest < painted_low + GUARD) p = put_str(p, " overflow");
  *p++ = '\n';
  painted_low = painted_top = 0;
  ondevice_write(out, (size_t)(p - out));
}

static void on_line(void) {
  line[line_len] = '\0';
  const char *name = 0;
  if (starts(line, "[ RUN      ] ")) {
    size_t i = 0;
    for (name = line + 13; name[i] && name[i] != ' ' && i < NAME_MAX_CHARS; i++) running[i] = name[i];
    running[i] = '\0';
    paint();
    return;
  }
  if (starts(line, "[       OK ] ") || starts(line, "[  FAILED  ] ") || starts(line, "[  SKIPPED ] ")) name = line + 13;
  if (!name || !running[0] || !painted_top) return;
  size_t i = 0;
  while (running[i] && name[i] == running[i]) i++;
  if (running[i] || (name[i] && name[i] != ' ')) return; /* another case's line */
  take();
  running[0] = '\0';
}

void ondevice_watch_output(const char *data, size_t len) {
  if (ondevice_cases_marked || !ondevice_stack_bottom || !ondevice_stack_top) return;
  for (size_t i = 0; i < len; i++) {
    char c = data[i];
    if (c == '\n' || c == '\r') {
      if (line_len) on_line();
      line_len = 0;
    } else if (line_len < sizeof line - 1) {
      line[line_len++] = c;
    }
  }
}
