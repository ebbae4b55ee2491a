// The reference port, as in TFLM: stderr, unbuffered, beside the test's own stdout.
#include "tensorflow/lite/micro/debug_log.h"

#include <cstdio>

extern "C" void DebugLog(const char* format, va_list args) { vfprintf(stderr, format, args); }

extern "C" int DebugVsnprintf(char* buffer, size_t buf_size, const char* format, va_list vlist) {
  return vsnprintf(buffer, buf_size, format, vlist);
}
