#ifndef TENSORFLOW_LITE_MICRO_DEBUG_LOG_H_
#define TENSORFLOW_LITE_MICRO_DEBUG_LOG_H_
#include <stdarg.h>
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
// As TFLM declares it: a port prints one formatted piece, without adding a newline.
void DebugLog(const char* format, va_list args);
int DebugVsnprintf(char* buffer, size_t buf_size, const char* format, va_list vlist);
#ifdef __cplusplus
}
#endif
#endif
