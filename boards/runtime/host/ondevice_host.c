/* Host runtime: the one function micro_test.h needs, on a hosted libc. */
#include <stddef.h>
#include <unistd.h>

void ondevice_write(const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(1, data, len);
    if (n <= 0) return;
    data += n;
    len -= (size_t)n;
  }
}
