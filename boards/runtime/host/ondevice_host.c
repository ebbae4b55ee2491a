/* Host runtime: the one function micro_test.h needs, on a hosted libc. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

void ondevice_write(const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(1, data, len);
    if (n <= 0) return;
    data += n;
    len -= (size_t)n;
  }
}

/* Bench cycle source on a hosted system: CLOCK_MONOTONIC in ns. */
const uint64_t ondevice_cycles_mask = ~(uint64_t)0;
const char ondevice_cycles_unit[] = "ns";

void ondevice_cycles_init(void) {}

uint64_t ondevice_cycles(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
