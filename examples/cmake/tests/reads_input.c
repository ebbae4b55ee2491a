/* Reads its vectors from a file relative to its working directory, and a scale from its
 * environment (CTest's WORKING_DIRECTORY, REQUIRED_FILES and ENVIRONMENT). */
#include <stdio.h>
#include <stdlib.h>
#include "dot.h"

int main(int argc, char **argv) {
  FILE *f = fopen(argc > 1 ? argv[1] : "inputs/vectors.txt", "r");
  const char *scale = getenv("DOT_SCALE");
  if (!f || !scale) {
    fprintf(stderr, "no input file or no DOT_SCALE\n");
    return 2;
  }
  int n, expected;
  signed char a[16], b[16];
  if (fscanf(f, "%d %d", &n, &expected) != 2 || n > 16) return 3;
  for (int i = 0; i < n; i++) { int x; if (fscanf(f, "%d", &x) != 1) return 3; a[i] = (signed char)x; }
  for (int i = 0; i < n; i++) { int x; if (fscanf(f, "%d", &x) != 1) return 3; b[i] = (signed char)x; }
  int got = dot_s8(a, b, n) * atoi(scale);
  printf("scaled dot: %d\n", got);
  return got == expected ? 0 : 1;
}
