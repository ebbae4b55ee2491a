#include "cdot.h"

int32_t ondevice_cdot_s8(const int8_t *a, int32_t a_zero, const int8_t *b, int32_t b_zero, size_t n) {
    int32_t acc = 0;
    size_t i = 0;
    /* unrolled by four, as a port to a small core would start */
    for (; i + 4 <= n; i += 4) {
        acc += ((int32_t)a[i] - a_zero) * ((int32_t)b[i] - b_zero);
        acc += ((int32_t)a[i + 1] - a_zero) * ((int32_t)b[i + 1] - b_zero);
        acc += ((int32_t)a[i + 2] - a_zero) * ((int32_t)b[i + 2] - b_zero);
        acc += ((int32_t)a[i + 3] - a_zero) * ((int32_t)b[i + 3] - b_zero);
    }
    for (; i < n; i++) {
        acc += ((int32_t)a[i] - a_zero) * ((int32_t)b[i] - b_zero);
    }
    return acc;
}

uint32_t ondevice_cdot_version(void) { return 1; }
