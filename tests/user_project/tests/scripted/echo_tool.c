/* A tiny CLI: prints its arguments' dot product (the kernel under test), one per line read */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc > 1) {
    printf("args %d\n", argc - 1);
    return 0;
  }
  char line[128];
  printf("ready\n");
  fflush(stdout);
  while (fgets(line, sizeof line, stdin)) {
    int x = atoi(line);
    printf("= %d\n", x * x);
    fflush(stdout);
  }
  return 0;
}
