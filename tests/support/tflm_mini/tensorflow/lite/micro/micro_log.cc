#include "tensorflow/lite/micro/micro_log.h"

#include "tensorflow/lite/micro/debug_log.h"

namespace {
void VDebugLog(const char* format, ...) {
  va_list args;
  va_start(args, format);
  DebugLog(format, args);
  va_end(args);
}
}  // namespace

// TFLM ends every MicroPrintf line with "\r\n", including lines that already end in "\n".
void VMicroPrintf(const char* format, va_list args) {
  DebugLog(format, args);
  VDebugLog("\r\n");
}

void MicroPrintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  VMicroPrintf(format, args);
  va_end(args);
}
