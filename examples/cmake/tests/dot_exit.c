/* No framework: the exit status is the verdict, as CTest reads it. (Named apart from the *_test.c
 * pattern: a CMake project's sources are collected through CTest, not one by one.) */
#include <stdio.h>
#include "dot.h"

int main(void) {
  const signed char a[] = {1, 2, 3}, b[] = {4, 5, 6};
  int got = dot_s8(a, b, 3);
  if (got != 32) {
    fprintf(stderr, "dot_s8 gave %d, expected 32\n", got);
    return 1;
  }
  puts("dot_s8 ok");
  return 0;
}
