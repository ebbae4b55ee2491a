/* Building an "#ondevice fault" line without printf: a fault handler cannot trust the
 * heap or stdio. Shared by every arch's fault handler. */
#ifndef ONDEVICE_FAULT_LINE_H
#define ONDEVICE_FAULT_LINE_H
#include <stdint.h>

#include "put.h"

#define ONDEVICE_FAULT_EXIT 3 /* the exit status of a fault, on every arch */
/* Unity keeps its running case's name in the second field of its global `Unity` (since
 * Unity 2.0): a fault line of a binary that links Unity names it (" case=NAME"), so the fault
 * is the case's that Unity was running, not the first case without a verdict line. */
struct ondevice_unity_head {
  const char *file;
  const char *current_test_name;
};
extern struct ondevice_unity_head Unity __attribute__((weak));

static char *put_unity_case(char *p, int room) {
  const char *s = &Unity != 0 ? Unity.current_test_name : 0;
  if (s == 0) return p;
  p = put_str(p, " case=");
  for (int i = 0; s[i] > ' ' && s[i] < 127 && i < room; ++i) *p++ = s[i];
  return p;
}
#endif
