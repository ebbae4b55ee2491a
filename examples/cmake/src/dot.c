#include "dot.h"

int dot_s8(const signed char *a, const signed char *b, int n) {
  int sum = 0;
  for (int i = 0; i < n; i++) sum += a[i] * b[i];
  return sum;
}
