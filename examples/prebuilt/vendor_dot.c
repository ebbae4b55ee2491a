/* A "vendor kernel library" we only get prebuilt: make_vendor_lib.py compiles this into
 * vendor/<board>/libvendor.a for each board, the way a vendor would ship it. */
#include "vendor_dot.h"

int32_t vendor_dot_s8(const int8_t *a, const int8_t *b, int n) {
  int32_t acc = 0;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
