#ifndef TENSORFLOW_LITE_MICRO_MICRO_LOG_H_
#define TENSORFLOW_LITE_MICRO_MICRO_LOG_H_
#include <cstdarg>
void MicroPrintf(const char* format, ...);
void VMicroPrintf(const char* format, va_list args);
#endif
