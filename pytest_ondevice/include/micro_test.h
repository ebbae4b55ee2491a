/*
 * micro_test.h: pytest-ondevice's device-side test header.
 *
 * Offers both generations of TensorFlow Lite Micro's test harness with TFLM's
 * names and output, so existing sources compile unchanged:
 *   v1: TF_LITE_MICRO_TESTS_BEGIN / TF_LITE_MICRO_TEST(name) / ..._END
 *   v2: TEST(Suite, Name) / TEST_F / EXPECT_* / ASSERT_* / RUN_ALL_TESTS()
 * The output protocol is documented in docs/protocol.md.
 *
 * C99/C11 and C++11 or later. No heap and no libc: the only thing the board
 * runtime must supply is
 *     void ondevice_write(const char *data, size_t len);
 * Everything here is static, so the header belongs in the test's own
 * translation unit (the one that holds main).
 */
#ifndef PYTEST_ONDEVICE_MICRO_TEST_H_
#define PYTEST_ONDEVICE_MICRO_TEST_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
void ondevice_write(const char *data, size_t len);
#ifdef __cplusplus
}
#endif

#ifndef ONDEVICE_PRINT_BUFFER
#define ONDEVICE_PRINT_BUFFER 128
#endif
#ifndef ONDEVICE_EOL
#define ONDEVICE_EOL "\r\n" /* TFLM's MicroPrintf ends lines with \r\n */
#endif
#ifndef ONDEVICE_MAX_TESTS
#define ONDEVICE_MAX_TESTS 256
#endif

#if defined(__GNUC__) || defined(__clang__)
#define OD_UNUSED __attribute__((unused))
#else
#define OD_UNUSED
#endif

/* ------------------------------------------------------------------------ */
/* A small printf: enough for test messages, no libc.                        */
/* ------------------------------------------------------------------------ */

typedef struct {
  char buf[ONDEVICE_PRINT_BUFFER];
  size_t n;
} od_out_t;

static inline void od_flush(od_out_t *o) {
  if (o->n) {
    ondevice_write(o->buf, o->n);
    o->n = 0;
  }
}

static inline void od_putc(od_out_t *o, char c) {
  if (o->n == sizeof(o->buf)) od_flush(o);
  o->buf[o->n++] = c;
}

static inline size_t od_strlen(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

static inline void od_pad(od_out_t *o, int count, char c) {
  while (count-- > 0) od_putc(o, c);
}

/* Writes s (len chars) right- or left-justified in width. */
static inline void od_field(od_out_t *o, const char *s, size_t len, int width, int left,
                            char pad) {
  int fill = width > (int)len ? width - (int)len : 0;
  if (!left && pad == '0' && len && (s[0] == '-' || s[0] == '+')) {
    od_putc(o, s[0]);
    s++;
    len--;
  }
  if (!left) od_pad(o, fill, pad);
  while (len--) od_putc(o, *s++);
  if (left) od_pad(o, fill, ' ');
}

/* Formats v into the end of tmp (size 32); returns the start. */
static inline char *od_utoa(unsigned long long v, unsigned base, int upper, char *end) {
  const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  *--end = '\0';
  do {
    *--end = digits[v % base];
    v /= base;
  } while (v);
  return end;
}

/* Fixed-point rendering of a double with prec decimals (no libm). */
static inline size_t od_ftoa(double v, int prec, char *out, size_t cap) {
  size_t n = 0;
  unsigned long long scale = 1, whole, frac;
  char tmp[32];
  char *p;
  int i;
  if (v != v) {
    out[0] = 'n'; out[1] = 'a'; out[2] = 'n';
    return 3;
  }
  if (v < 0) {
    out[n++] = '-';
    v = -v;
  }
  if (v > 1.8e19) {
    out[n++] = 'i'; out[n++] = 'n'; out[n++] = 'f';
    return n;
  }
  if (prec > 9) prec = 9;
  for (i = 0; i < prec; i++) scale *= 10;
  whole = (unsigned long long)v;
  frac = (unsigned long long)((v - (double)whole) * (double)scale + 0.5);
  if (frac >= scale) {
    whole++;
    frac -= scale;
  }
  for (p = od_utoa(whole, 10, 0, tmp + sizeof(tmp)); *p && n < cap; p++) out[n++] = *p;
  if (prec > 0 && n < cap) {
    out[n++] = '.';
    for (i = prec - 1; i >= 0 && n + (size_t)i < cap; i--) {
      out[n + (size_t)i] = (char)('0' + frac % 10);
      frac /= 10;
    }
    n += (size_t)prec;
  }
  return n;
}

static inline void od_vformat(od_out_t *o, const char *fmt, va_list ap) {
  char tmp[48];
  for (; *fmt; fmt++) {
    int left = 0, width = 0, prec = -1, lng = 0, plus = 0;
    char pad = ' ';
    const char *s;
    size_t len;
    if (*fmt != '%') {
      od_putc(o, *fmt);
      continue;
    }
    fmt++;
    for (;; fmt++) {
      if (*fmt == '-') left = 1;
      else if (*fmt == '0') pad = '0';
      else if (*fmt == '+') plus = 1;
      else if (*fmt == ' ' || *fmt == '#') continue;
      else break;
    }
    if (*fmt == '*') {
      width = va_arg(ap, int);
      fmt++;
    } else {
      while (*fmt >= '0' && *fmt <= '9') width = width * 10 + (*fmt++ - '0');
    }
    if (*fmt == '.') {
      prec = 0;
      fmt++;
      if (*fmt == '*') {
        prec = va_arg(ap, int);
        fmt++;
      } else {
        while (*fmt >= '0' && *fmt <= '9') prec = prec * 10 + (*fmt++ - '0');
      }
    }
    for (;; fmt++) {
      if (*fmt == 'l') lng++;
      else if (*fmt == 'z' || *fmt == 'j' || *fmt == 't') lng = 2;
      else if (*fmt == 'h' || *fmt == 'L') continue;
      else break;
    }
    switch (*fmt) {
      case 'd':
      case 'i': {
        long long v = lng >= 2 ? va_arg(ap, long long)
                      : lng == 1 ? (long long)va_arg(ap, long)
                                 : (long long)va_arg(ap, int);
        unsigned long long mag = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        char *p = od_utoa(mag, 10, 0, tmp + sizeof(tmp));
        if (v < 0) *--p = '-';
        else if (plus) *--p = '+';
        od_field(o, p, od_strlen(p), width, left, pad);
        break;
      }
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        unsigned long long v = lng >= 2 ? va_arg(ap, unsigned long long)
                               : lng == 1 ? (unsigned long long)va_arg(ap, unsigned long)
                                          : (unsigned long long)va_arg(ap, unsigned int);
        unsigned base = *fmt == 'u' ? 10 : *fmt == 'o' ? 8 : 16;
        char *p = od_utoa(v, base, *fmt == 'X', tmp + sizeof(tmp));
        od_field(o, p, od_strlen(p), width, left, pad);
        break;
      }
      case 'p': {
        char *p = od_utoa((unsigned long long)(uintptr_t)va_arg(ap, void *), 16, 0,
                          tmp + sizeof(tmp));
        *--p = 'x';
        *--p = '0';
        od_field(o, p, od_strlen(p), width, left, ' ');
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        len = od_ftoa(va_arg(ap, double), prec < 0 ? 6 : prec, tmp, sizeof(tmp));
        od_field(o, tmp, len, width, left, pad);
        break;
      }
      case 'c':
        tmp[0] = (char)va_arg(ap, int);
        od_field(o, tmp, 1, width, left, ' ');
        break;
      case 's':
        s = va_arg(ap, const char *);
        if (!s) s = "(null)";
        len = od_strlen(s);
        if (prec >= 0 && (size_t)prec < len) len = (size_t)prec;
        od_field(o, s, len, width, left, ' ');
        break;
      case '%':
        od_putc(o, '%');
        break;
      case '\0':
        fmt--;
        break;
      default:
        od_putc(o, '%');
        od_putc(o, *fmt);
    }
  }
}

/* TFLM's MicroPrintf: one formatted line, terminated with ONDEVICE_EOL. */
static inline OD_UNUSED void MicroPrintf(const char *fmt, ...) {
  od_out_t o;
  const char *eol = ONDEVICE_EOL;
  va_list ap;
  o.n = 0;
  va_start(ap, fmt);
  od_vformat(&o, fmt, ap);
  va_end(ap);
  while (*eol) od_putc(&o, *eol++);
  od_flush(&o);
}

/* ------------------------------------------------------------------------ */
/* Values printed in failure messages: integers, floats and pointers.        */
/* ------------------------------------------------------------------------ */

typedef struct {
  char kind; /* 'i' signed, 'u' unsigned, 'f' floating, 'p' pointer */
  long long i;
  unsigned long long u;
  double f;
} od_value_t;

static inline od_value_t od_make_value(char kind, long long i, unsigned long long u, double f) {
  od_value_t v;
  v.kind = kind;
  v.i = i;
  v.u = u;
  v.f = f;
  return v;
}

/* Renders v as TFLM does (%d for integers, %f for floats) into buf. */
static inline const char *od_value_str(od_value_t v, char *buf, size_t cap) {
  char *p;
  size_t n;
  switch (v.kind) {
    case 'f':
      n = od_ftoa(v.f, 6, buf, cap - 1);
      buf[n] = '\0';
      return buf;
    case 'u':
      return od_utoa(v.u, 10, 0, buf + cap);
    case 'p':
      p = od_utoa(v.u, 16, 0, buf + cap);
      *--p = 'x';
      *--p = '0';
      return p;
    default:
      p = od_utoa(v.i < 0 ? 0ULL - (unsigned long long)v.i : (unsigned long long)v.i, 10, 0,
                  buf + cap);
      if (v.i < 0) *--p = '-';
      return p;
  }
}

#ifdef __cplusplus
static inline od_value_t od_value(bool v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value(char v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value(signed char v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value(short v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value(int v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value(long v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value(long long v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value(unsigned char v) { return od_make_value('u', 0, v, 0); }
static inline od_value_t od_value(unsigned short v) { return od_make_value('u', 0, v, 0); }
static inline od_value_t od_value(unsigned int v) { return od_make_value('u', 0, v, 0); }
static inline od_value_t od_value(unsigned long v) { return od_make_value('u', 0, v, 0); }
static inline od_value_t od_value(unsigned long long v) { return od_make_value('u', 0, v, 0); }
static inline od_value_t od_value(float v) { return od_make_value('f', 0, 0, v); }
static inline od_value_t od_value(double v) { return od_make_value('f', 0, 0, v); }
static inline od_value_t od_value(long double v) { return od_make_value('f', 0, 0, (double)v); }
static inline od_value_t od_value(const volatile void *v) {
  return od_make_value('p', 0, (unsigned long long)(uintptr_t)v, 0);
}
static inline od_value_t od_value(decltype(nullptr)) { return od_make_value('p', 0, 0, 0); }
#define OD_VALUE(v) od_value(v)
#define OD_LET(var, expr) auto var = (expr)
#else
static inline od_value_t od_value_i(long long v) { return od_make_value('i', v, 0, 0); }
static inline od_value_t od_value_u(unsigned long long v) { return od_make_value('u', 0, v, 0); }
static inline od_value_t od_value_f(double v) { return od_make_value('f', 0, 0, v); }
static inline od_value_t od_value_p(const volatile void *v) {
  return od_make_value('p', 0, (unsigned long long)(uintptr_t)v, 0);
}
#define OD_VALUE(v)                                                                       \
  _Generic((v), float: od_value_f, double: od_value_f, long double: od_value_f,           \
           unsigned char: od_value_u, unsigned short: od_value_u, unsigned int: od_value_u, \
           unsigned long: od_value_u, unsigned long long: od_value_u, char *: od_value_p,  \
           const char *: od_value_p, void *: od_value_p, const void *: od_value_p,          \
           default: od_value_i)(v)
#define OD_LET(var, expr) __typeof__(expr) var = (expr)
#endif

static inline int od_streq(const char *a, const char *b) {
  if (!a || !b) return a == b;
  while (*a && *a == *b) {
    a++;
    b++;
  }
  return *a == *b;
}

static inline double od_absdiff(double a, double b) { return a > b ? a - b : b - a; }

/* Prints "<prefix>A<sep>B<suffix>" with both values rendered. */
static inline void od_print_pair(const char *fmt_ab, od_value_t a, od_value_t b) {
  char ba[32], bb[32];
  MicroPrintf(fmt_ab, od_value_str(a, ba, sizeof(ba)), od_value_str(b, bb, sizeof(bb)));
}

/* State shared by both generations: did the running case fail or skip? */
static OD_UNUSED int od_case_failed;
static OD_UNUSED int od_case_skipped;

/* Per-run nonce (docs/protocol.md): the first line of a run declares it, and our own
 * case and summary markers carry it, so a line a test prints ("Testing Other", a pass
 * string, a replayed log) can neither start, end nor close a case. It mixes the
 * addresses the loader chose (ASLR) with the board's ondevice_entropy() when the runtime
 * supplies one; it only has to be unknown to the test's source, not secret. */
static OD_UNUSED char od_nonce[17];
#if defined(__GNUC__) || defined(__clang__)
#ifdef __cplusplus
extern "C" {
#endif
uint64_t ondevice_entropy(void) __attribute__((weak));
extern int ondevice_cases_marked __attribute__((weak)); /* the runtime's casewatch.c, when linked */
/* The nonce line's format, as a symbol: the host finds its name in the binary, knows the
 * binary was built with this header, and so expects that line before anything it judges
 * (code that prints a pass and exits before main is not taken for our output). */
#ifdef __cplusplus /* a const at namespace scope is internal in C++ unless declared extern */
extern const char ondevice_nonce_line[] __attribute__((weak)) = "#ondevice nonce %s";
#else
__attribute__((weak)) const char ondevice_nonce_line[] = "#ondevice nonce %s";
#endif
#ifdef __cplusplus
}
#endif
#endif

static inline OD_UNUSED uint64_t od_mix(uint64_t x) { /* splitmix64 */
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* ---- A CUDA test's GPU --------------------------------------------------------------
 * A binary built by nvcc asks for its GPU before the first case. No device, no driver or
 * one older than the runtime is the device's trouble, not the test's: a stamped line (a
 * case cannot forge it) says so, and the host makes each case an error naming the device
 * and the CUDA error (docs/cuda.md). A usable GPU is named, for the report. */
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <stdlib.h>
#define ONDEVICE_UNAVAILABLE_EXIT 4
static OD_UNUSED void od_gpu_check(void) {
  int count = 0, driver = 0, runtime = 0;
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count == 0) e = cudaErrorNoDevice;
  if (e != cudaSuccess) {
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    MicroPrintf("#ondevice %s unavailable no usable CUDA GPU: %s (%d): %s (driver supports CUDA %d, runtime is %d)",
                od_nonce, cudaGetErrorName(e), (int)e, cudaGetErrorString(e), driver, runtime);
    exit(ONDEVICE_UNAVAILABLE_EXIT);
  }
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return;
#ifdef ONDEVICE_CUDA_MIN_ARCH /* the lowest architecture nvcc built for (the board's [cuda] archs) */
  if (prop.major * 10 + prop.minor < ONDEVICE_CUDA_MIN_ARCH) {
    MicroPrintf("#ondevice %s unavailable the GPU %s is sm_%d%d, older than sm_%d, the lowest architecture this "
                "binary was built for (the board's [cuda] archs)",
                od_nonce, prop.name, prop.major, prop.minor, ONDEVICE_CUDA_MIN_ARCH);
    exit(ONDEVICE_UNAVAILABLE_EXIT);
  }
#endif
  MicroPrintf("#ondevice %s gpu %s sm_%d%d", od_nonce, prop.name, prop.major, prop.minor);
}
#define OD_DEVICE_CHECK() od_gpu_check()
#else
#define OD_DEVICE_CHECK() ((void)0)
#endif

static inline OD_UNUSED void od_nonce_init(const void *seed) {
  volatile uint64_t here = 0;
  uint64_t x = od_mix((uint64_t)(uintptr_t)seed);
  int i;
  x = od_mix(x ^ (uint64_t)(uintptr_t)&here);
  x = od_mix(x ^ (uint64_t)(uintptr_t)&od_nonce);
  x = od_mix(x ^ (uint64_t)(uintptr_t)&od_mix);
#if defined(__GNUC__) || defined(__clang__)
  if (ondevice_entropy) x = od_mix(x ^ ondevice_entropy());
#endif
  if (!x) x = 1;
  for (i = 15; i >= 0; i--, x >>= 4) od_nonce[i] = "0123456789abcdef"[x & 15];
  od_nonce[16] = '\0';
#if defined(__GNUC__) || defined(__clang__)
  if (&ondevice_cases_marked) ondevice_cases_marked = 1; /* casewatch.c: our markers measure each case */
#endif
#if defined(__GNUC__) || defined(__clang__)
  MicroPrintf(ondevice_nonce_line, od_nonce);
#else
  MicroPrintf("#ondevice nonce %s", od_nonce);
#endif
  OD_DEVICE_CHECK();
}

/* ---- Stack high-water per case ------------------------------------------------------
 * Before a case's body the stack below the running frame is painted with a pattern; after
 * it, the deepest word no longer holding the pattern says how deep the case went, sent as
 *   #ondevice NONCE stack NAME BYTES [limit=L] [overflow|beyond]
 * Bare metal paints down to the bottom of the stack (the symbol ondevice_stack_bottom,
 * which the board's linker script defines): the pattern gone at the bottom is an
 * overflow. A hosted run (Linux, the host) paints ONDEVICE_STACK_PAINT bytes below the
 * frame ("beyond": the case went deeper than that). ONDEVICE_STACK_LIMIT(Case, bytes), at
 * file scope, gives a case a budget (docs/memory.md). -DONDEVICE_STACK_DISABLE: off. */
#if !defined(ONDEVICE_STACK_DISABLE) && (defined(__GNUC__) || defined(__clang__))
#define OD_STACK 1
#if defined(__linux__) || defined(__APPLE__) || defined(__unix__)
#define OD_STACK_HOSTED 1
#ifndef ONDEVICE_STACK_PAINT
#define ONDEVICE_STACK_PAINT (256 * 1024)
#endif
#else
#ifdef __cplusplus
extern "C" {
#endif
extern uint32_t ondevice_stack_bottom[] __attribute__((weak));
#ifdef __cplusplus
}
#endif
#endif
#define OD_STACK_PATTERN 0x5AA5C33Cu
#ifndef ONDEVICE_STACK_GUARD
#define ONDEVICE_STACK_GUARD 256 /* the bottom band: reached, it is an overflow (or all but) */
#endif
#define OD_STACK_MARGIN 64 /* below the painter's frame: its own return, the next call's */
#ifndef ONDEVICE_MAX_STACK_LIMITS
#define ONDEVICE_MAX_STACK_LIMITS 32
#endif

static OD_UNUSED uintptr_t od_stack_main; /* the frame of main (v1) or of the v2 runner: the base */
static OD_UNUSED uintptr_t od_stack_base, od_stack_top, od_stack_low;
static OD_UNUSED long od_stack_used = -1;
static OD_UNUSED long od_stack_case_limit; /* the running case's budget, found once by od_stack_take */
static OD_UNUSED int od_stack_edge; /* 1: the painted region's bottom word was written */
static OD_UNUSED struct {
  const char *name;
  long bytes;
} od_stack_limits[ONDEVICE_MAX_STACK_LIMITS];
static OD_UNUSED int od_stack_limit_count;

static inline OD_UNUSED void od_stack_limit(const char *name, long bytes) {
  if (od_stack_limit_count < ONDEVICE_MAX_STACK_LIMITS) {
    od_stack_limits[od_stack_limit_count].name = name;
    od_stack_limits[od_stack_limit_count].bytes = bytes;
    od_stack_limit_count++;
  }
}

/* A case's budget: its own ONDEVICE_STACK_LIMIT, else the project's (ondevice.toml:
 * defines = ["ONDEVICE_STACK_LIMIT_DEFAULT=4096"]), else the board's [memory] stack_limit. */
#if defined(ONDEVICE_STACK_LIMIT_DEFAULT)
#define OD_STACK_LIMIT_DEFAULT ((long)(ONDEVICE_STACK_LIMIT_DEFAULT))
#define OD_STACK_LIMIT_FROM "ONDEVICE_STACK_LIMIT_DEFAULT"
#elif defined(ONDEVICE_BOARD_STACK_LIMIT)
#define OD_STACK_LIMIT_DEFAULT ((long)(ONDEVICE_BOARD_STACK_LIMIT))
#define OD_STACK_LIMIT_FROM "the board's [memory] stack_limit"
#else
#define OD_STACK_LIMIT_DEFAULT 0L
#define OD_STACK_LIMIT_FROM ""
#endif
static OD_UNUSED const char *od_stack_limit_from = OD_STACK_LIMIT_FROM;

static inline OD_UNUSED long od_stack_limit_of(const char *suite, const char *name) {
  int i;
  od_stack_limit_from = "ONDEVICE_STACK_LIMIT";
  for (i = 0; i < od_stack_limit_count; i++) {
    const char *n = od_stack_limits[i].name, *dot = n;
    while (*dot && *dot != '.') dot++;
    if (*dot && suite) { /* "Suite.Name" */
      const char *a = n, *b = suite;
      while (a < dot && *b && *a == *b) a++, b++;
      if (a == dot && !*b && od_streq(dot + 1, name)) return od_stack_limits[i].bytes;
    } else if (!*dot && od_streq(n, name)) {
      return od_stack_limits[i].bytes;
    }
  }
  od_stack_limit_from = OD_STACK_LIMIT_FROM;
  return OD_STACK_LIMIT_DEFAULT;
}

/* ONDEVICE_STACK_LIMIT(Case, bytes) for a v1 case, ONDEVICE_STACK_LIMIT(Suite, Name, bytes) for v2 */
#define OD_STACK_LIMIT_2(name, bytes)                                                \
  __attribute__((constructor)) static void od_stack_limit_##name(void) {             \
    od_stack_limit(#name, (long)(bytes));                                            \
  }
#define OD_STACK_LIMIT_3(suite, name, bytes)                                         \
  __attribute__((constructor)) static void od_stack_limit_##suite##_##name(void) {   \
    od_stack_limit(#suite "." #name, (long)(bytes));                                 \
  }
#define OD_PICK_3(a, b, c, chosen, ...) chosen
#define ONDEVICE_STACK_LIMIT(...) OD_PICK_3(__VA_ARGS__, OD_STACK_LIMIT_3, OD_STACK_LIMIT_2, )(__VA_ARGS__)

__attribute__((noinline)) static OD_UNUSED void od_stack_paint(void) {
  volatile uint32_t here = 0;
  uintptr_t top = ((uintptr_t)&here - OD_STACK_MARGIN) & ~(uintptr_t)3, low;
  volatile uint32_t *p;
  od_stack_top = 0;
#ifdef OD_STACK_HOSTED
  low = top - ONDEVICE_STACK_PAINT;
#else
  if (!ondevice_stack_bottom) return; /* a board whose linker script does not say where it ends */
  low = ((uintptr_t)ondevice_stack_bottom + 3) & ~(uintptr_t)3;
  if (low >= top) return;
#endif
  for (p = (volatile uint32_t *)low; (uintptr_t)p < top; ++p) *p = OD_STACK_PATTERN;
  od_stack_low = low;
  od_stack_top = top;
  /* counted from main's frame: a v1 case's own locals live there (one frame for every case) */
  od_stack_base = od_stack_main > top ? od_stack_main : (uintptr_t)&here;
}

/* After the case's body: its depth; past the bottom of the stack or over its limit, the
 * case fails here, on the device, so that the device's own tally agrees. */
__attribute__((noinline)) static OD_UNUSED void od_stack_take(const char *suite, const char *name) {
  const volatile uint32_t *p;
  long limit;
  od_stack_used = -1;
  od_stack_case_limit = 0;
  if (!od_stack_top) return;
  for (p = (const volatile uint32_t *)od_stack_low; (uintptr_t)p < od_stack_top && *p == OD_STACK_PATTERN; ++p) {
  }
  /* a frame that crossed the bottom need not write the bottom word itself: the last
   * ONDEVICE_STACK_GUARD bytes written at all is the edge */
  od_stack_edge = (uintptr_t)p < od_stack_low + ONDEVICE_STACK_GUARD;
  /* untouched: the case stayed within main's frame and the margin, counted whole */
  od_stack_used = (long)(od_stack_base - ((uintptr_t)p >= od_stack_top ? od_stack_top : (uintptr_t)p));
  limit = od_stack_case_limit = od_stack_limit_of(suite, name);
#ifndef OD_STACK_HOSTED
  if (od_stack_edge) {
    MicroPrintf("FAIL: stack overflow: the case reached the last %d bytes of the stack or ran past its "
                "bottom (%ld bytes or more below main's frame)",
                ONDEVICE_STACK_GUARD, od_stack_used);
    od_case_failed = 1;
    return;
  }
#endif
  if (limit > 0 && od_stack_used > limit) {
    MicroPrintf("FAIL: stack high-water %ld bytes is over this case's limit of %ld (%s)", od_stack_used, limit,
                od_stack_limit_from);
    od_case_failed = 1;
  }
}

static inline OD_UNUSED void od_stack_report(const char *suite, const char *name) {
  long bytes = od_stack_case_limit;
  const char *edge = "";
  if (od_stack_used < 0) return;
  if (od_stack_edge) {
#ifdef OD_STACK_HOSTED
    edge = " beyond";
#else
    edge = " overflow";
#endif
  }
  if (bytes > 0) {
    MicroPrintf("#ondevice %s stack %s%s%s %ld limit=%ld%s", od_nonce, suite ? suite : "", suite ? "." : "", name,
                od_stack_used, bytes, edge);
  } else {
    MicroPrintf("#ondevice %s stack %s%s%s %ld%s", od_nonce, suite ? suite : "", suite ? "." : "", name,
                od_stack_used, edge);
  }
  od_stack_used = -1;
}
/* The top of main's frame, where a v1 case's locals begin: the CFA (the stack pointer at the
 * call of main) is that on every architecture, while the frame address is the top of the
 * frame on x86-64 and RISC-V but its bottom on AArch64 and Arm (main's locals then went
 * uncounted: 68 bytes on a Pi where the host read 200) */
#if defined(__GNUC__)
#define OD_STACK_MAIN() (od_stack_main = (uintptr_t)__builtin_dwarf_cfa())
#else
#define OD_STACK_MAIN() (od_stack_main = (uintptr_t)__builtin_frame_address(0))
#endif
#else
#define OD_STACK_MAIN() ((void)0)
#define ONDEVICE_STACK_LIMIT(...)
static inline OD_UNUSED void od_stack_paint(void) {}
static inline OD_UNUSED void od_stack_take(const char *suite, const char *name) {
  (void)suite;
  (void)name;
}
static inline OD_UNUSED void od_stack_report(const char *suite, const char *name) {
  (void)suite;
  (void)name;
}
#endif

/* A hosted binary's peak resident memory, sent before the summary: the larger of Linux's
 * VmHWM at the end and VmRSS sampled as each case ends (VmHWM may miss a peak already
 * unmapped; getrusage's ru_maxrss keeps what the process had before its exec). */
#if defined(__linux__) && !defined(ONDEVICE_RSS_DISABLE)
#include <fcntl.h>
#include <unistd.h>
static OD_UNUSED long long od_rss_peak;

/* never inlined: its 4 KiB buffer in main's frame was counted as every case's stack */
__attribute__((noinline)) static OD_UNUSED long long od_status_kib(const char key[6]) {
  char buf[4096];
  long long kib = -1;
  int fd = open("/proc/self/status", O_RDONLY), i;
  ssize_t n;
  if (fd < 0) return -1;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  for (char *p = buf; *p; p++) {
    for (i = 0; i < 6 && p[i] == key[i]; i++) {
    }
    if (i == 6) {
      for (p += 6; *p == ' ' || *p == '\t'; p++) {
      }
      for (kib = 0; *p >= '0' && *p <= '9'; p++) kib = kib * 10 + (*p - '0');
      break;
    }
  }
  return kib;
}

static inline OD_UNUSED void od_sample_rss(void) {
  long long kib = od_status_kib("VmRSS:");
  if (kib > od_rss_peak) od_rss_peak = kib;
}

static inline OD_UNUSED void od_report_rss(void) {
  long long kib = od_status_kib("VmHWM:");
  if (od_rss_peak > kib) kib = od_rss_peak;
  if (kib >= 0) MicroPrintf("#ondevice %s rss %lld", od_nonce, kib * 1024);
}
#else
static inline OD_UNUSED void od_sample_rss(void) {}
static inline OD_UNUSED void od_report_rss(void) {}
#endif

/* Our stamped markers: a case starts, a case ends with its verdict, the summary begins. */
static inline OD_UNUSED void od_mark_case(const char *suite, const char *name) {
  if (suite) MicroPrintf("#ondevice %s case %s.%s", od_nonce, suite, name);
  else MicroPrintf("#ondevice %s case %s", od_nonce, name);
}

static inline OD_UNUSED void od_mark_end(const char *suite, const char *name) {
  od_stack_report(suite, name);
  od_sample_rss();
  const char *verdict = od_case_failed ? "failed" : od_case_skipped ? "skipped" : "passed";
  if (suite) MicroPrintf("#ondevice %s end %s.%s %s", od_nonce, suite, name, verdict);
  else MicroPrintf("#ondevice %s end %s %s", od_nonce, name, verdict);
}

/* --ondevice-coverage on bare metal: the runtime's coverage.c sends gcov's counts as
 * stamped lines before the summary, which then vouches that they all arrived. */
#ifdef __cplusplus
extern "C" {
#endif
void ondevice_coverage_dump(const char *nonce) __attribute__((weak));
#ifdef __cplusplus
}
#endif

static inline OD_UNUSED void od_mark_summary(void) {
  od_report_rss();
  if (ondevice_coverage_dump) ondevice_coverage_dump(od_nonce);
  MicroPrintf("#ondevice %s summary", od_nonce);
}

/* ------------------------------------------------------------------------ */
/* v1: tensorflow/lite/micro/testing/micro_test.h                            */
/* ------------------------------------------------------------------------ */

static OD_UNUSED int od_v1_passed;
static OD_UNUSED int od_v1_failed;
static OD_UNUSED int od_v1_complete;

#define TF_LITE_MICRO_TESTS_BEGIN      \
  int main(int argc, char **argv) {    \
    (void)argc;                        \
    (void)argv;                        \
    od_v1_passed = 0;                  \
    od_v1_failed = 0;                  \
    OD_STACK_MAIN();                   \
    od_nonce_init(argv);

#define TF_LITE_MICRO_TESTS_END                                                \
  od_mark_summary();                                                           \
  MicroPrintf("%d/%d tests passed", od_v1_passed, od_v1_passed + od_v1_failed); \
  if (od_v1_failed == 0) {                                                     \
    MicroPrintf("~~~ALL TESTS PASSED~~~\n");                                   \
    return 0;                                                                  \
  }                                                                            \
  MicroPrintf("~~~SOME TESTS FAILED~~~\n");                                    \
  return 1;                                                                    \
  }

/* The for loop runs the body once; ASSERT's `continue` ends the case early. */
#define TF_LITE_MICRO_TEST(name)                                               \
  od_mark_case(NULL, #name);                                                   \
  MicroPrintf("Testing " #name);                                               \
  for (od_v1_complete = 0, od_case_failed = 0, od_case_skipped = 0,            \
      od_stack_paint();                                                        \
       !od_v1_complete;                                                        \
       od_stack_take(NULL, #name), od_v1_complete = 1, od_v1_passed += od_case_failed ? 0 : 1, \
      od_v1_failed += od_case_failed ? 1 : 0, od_mark_end(NULL, #name))

#define TF_LITE_MICRO_EXPECT(x)                                   \
  do {                                                            \
    if (!(x)) {                                                   \
      MicroPrintf(#x " failed at %s:%d", __FILE__, __LINE__);     \
      od_case_failed = 1;                                         \
    }                                                             \
  } while (0)

#define OD_V1_CMP(x, y, op, text)                                                  \
  do {                                                                             \
    OD_LET(od_vx, x);                                                              \
    OD_LET(od_vy, y);                                                              \
    if (!(od_vx op od_vy)) {                                                       \
      char od_ba[32], od_bb[32];                                                   \
      MicroPrintf(#x " " text " " #y " failed at %s:%d (%s vs %s)", __FILE__,      \
                  __LINE__, od_value_str(OD_VALUE(od_vx), od_ba, sizeof(od_ba)),   \
                  od_value_str(OD_VALUE(od_vy), od_bb, sizeof(od_bb)));            \
      od_case_failed = 1;                                                          \
    }                                                                              \
  } while (0)

#define TF_LITE_MICRO_EXPECT_EQ(x, y) OD_V1_CMP(x, y, ==, "==")
#define TF_LITE_MICRO_EXPECT_NE(x, y) OD_V1_CMP(x, y, !=, "!=")
#define TF_LITE_MICRO_EXPECT_GT(x, y) OD_V1_CMP(x, y, >, ">")
#define TF_LITE_MICRO_EXPECT_GE(x, y) OD_V1_CMP(x, y, >=, ">=")
#define TF_LITE_MICRO_EXPECT_LT(x, y) OD_V1_CMP(x, y, <, "<")
#define TF_LITE_MICRO_EXPECT_LE(x, y) OD_V1_CMP(x, y, <=, "<=")

#define TF_LITE_MICRO_EXPECT_NEAR(x, y, epsilon)                                        \
  do {                                                                                  \
    double od_dx = (double)(x), od_dy = (double)(y);                                    \
    double od_delta = od_absdiff(od_dx, od_dy);                                         \
    if (!(od_delta <= (double)(epsilon))) {                                             \
      MicroPrintf(#x " (%f) near " #y " (%f) failed at %s:%d", od_dx, od_dy, __FILE__, \
                  __LINE__);                                                            \
      od_case_failed = 1;                                                               \
    }                                                                                   \
  } while (0)

#define TF_LITE_MICRO_EXPECT_TRUE(x)                                  \
  do {                                                                \
    if (!(x)) {                                                       \
      MicroPrintf(#x " was not true failed at %s:%d", __FILE__, __LINE__); \
      od_case_failed = 1;                                             \
    }                                                                 \
  } while (0)

#define TF_LITE_MICRO_EXPECT_FALSE(x)                                  \
  do {                                                                 \
    if (x) {                                                           \
      MicroPrintf(#x " was not false failed at %s:%d", __FILE__, __LINE__); \
      od_case_failed = 1;                                              \
    }                                                                  \
  } while (0)

#define TF_LITE_MICRO_EXPECT_STRING_EQ(string1, string2)                              \
  do {                                                                                \
    const char *od_s1 = (string1), *od_s2 = (string2);                                \
    if (!od_streq(od_s1, od_s2)) {                                                    \
      MicroPrintf("FAIL: %s did not match %s at %s:%d", od_s1, od_s2, __FILE__,       \
                  __LINE__);                                                          \
      od_case_failed = 1;                                                             \
    }                                                                                 \
  } while (0)

#define TF_LITE_MICRO_FAIL(msg)                                 \
  do {                                                          \
    MicroPrintf("FAIL: %s at %s:%d", (msg), __FILE__, __LINE__); \
    od_case_failed = 1;                                         \
  } while (0)

/* Not wrapped in do/while: `continue` must reach TF_LITE_MICRO_TEST's loop. */
#define TF_LITE_MICRO_ASSERT(x)  \
  if (!(x)) {                    \
    TF_LITE_MICRO_EXPECT(x);     \
    continue;                    \
  } else                         \
    ((void)0)

/* Extension: skip the running v1 case (see docs/protocol.md). */
#define TF_LITE_MICRO_SKIP(reason)            \
  if (1) {                                    \
    MicroPrintf("#ondevice skip %s", (reason)); \
    od_case_skipped = 1;                      \
    continue;                                 \
  } else                                      \
    ((void)0)

/* ------------------------------------------------------------------------ */
/* v2: TFLM's micro_test_v2.h (GoogleTest's names and output)                */
/* ------------------------------------------------------------------------ */

typedef void (*od_test_fn)(void);
typedef struct {
  const char *suite;
  const char *name;
  od_test_fn fn;
  int failed;
} od_test_case_t;

static OD_UNUSED od_test_case_t od_tests[ONDEVICE_MAX_TESTS];
static OD_UNUSED int od_test_count;
static OD_UNUSED int od_test_overflow;

static inline OD_UNUSED void od_register_test(const char *suite, const char *name,
                                              od_test_fn fn) {
  if (od_test_count >= ONDEVICE_MAX_TESTS) {
    od_test_overflow++;
    return;
  }
  od_tests[od_test_count].suite = suite;
  od_tests[od_test_count].name = name;
  od_tests[od_test_count].fn = fn;
  od_tests[od_test_count].failed = 0;
  od_test_count++;
}

static inline OD_UNUSED int od_run_all_tests(void) {
  int i, failed = 0, passed = 0;
  OD_STACK_MAIN();
  od_nonce_init(&i);
  MicroPrintf("[==========] Running %d tests.", od_test_count);
  for (i = 0; i < od_test_count; i++) {
    od_test_case_t *t = &od_tests[i];
    od_mark_case(t->suite, t->name);
    MicroPrintf("[ RUN      ] %s.%s", t->suite, t->name);
    od_case_failed = 0;
    od_case_skipped = 0;
    od_stack_paint();
    t->fn();
    od_stack_take(t->suite, t->name);
    if (od_case_failed) {
      t->failed = 1;
      failed++;
      MicroPrintf("[  FAILED  ] %s.%s", t->suite, t->name);
    } else if (od_case_skipped) {
      passed++;
      MicroPrintf("[  SKIPPED ] %s.%s", t->suite, t->name);
    } else {
      passed++;
      MicroPrintf("[       OK ] %s.%s", t->suite, t->name);
    }
    od_mark_end(t->suite, t->name);
  }
  if (od_test_overflow) {
    MicroPrintf("FAIL: %d tests not registered: raise ONDEVICE_MAX_TESTS (%d)", od_test_overflow,
                ONDEVICE_MAX_TESTS);
    failed += od_test_overflow;
  }
  od_mark_summary();
  MicroPrintf("[==========] %d tests ran.", od_test_count);
  MicroPrintf("[  PASSED  ] %d tests.", passed);
  if (failed == 0) {
    MicroPrintf("~~~ALL TESTS PASSED~~~\n");
    return 0;
  }
  MicroPrintf("[  FAILED  ] %d tests, listed below:", failed);
  for (i = 0; i < od_test_count; i++) {
    if (od_tests[i].failed) MicroPrintf("[  FAILED  ] %s.%s", od_tests[i].suite, od_tests[i].name);
  }
  return 1;
}

#define RUN_ALL_TESTS() od_run_all_tests()
#define TF_LITE_MICRO_TESTS_MAIN       \
  int main(int argc, char **argv) {    \
    (void)argc;                        \
    (void)argv;                        \
    return RUN_ALL_TESTS();            \
  }

#define OD_REGISTER(suite, name, fn)                                          \
  __attribute__((constructor)) static void od_register_##suite##_##name(void) { \
    od_register_test(#suite, #name, fn);                                      \
  }

#define TEST(suite, name)                       \
  static void od_test_##suite##_##name(void);   \
  OD_REGISTER(suite, name, od_test_##suite##_##name) \
  static void od_test_##suite##_##name(void)

#ifdef __cplusplus
namespace testing {
class Test {
 public:
  virtual void SetUp() {}
  virtual void TearDown() {}

 protected:
  Test() {}
  ~Test() {}
};
}  // namespace testing

#define TEST_F(fixture, name)                                  \
  class fixture##_##name##_Test : public fixture {             \
   public:                                                     \
    void TestBody();                                           \
    static void Run() {                                        \
      fixture##_##name##_Test t;                               \
      t.SetUp();                                               \
      if (!od_case_failed && !od_case_skipped) t.TestBody();   \
      t.TearDown();                                            \
    }                                                          \
  };                                                           \
  OD_REGISTER(fixture, name, fixture##_##name##_Test::Run)     \
  void fixture##_##name##_Test::TestBody()
#endif

/* One failure block: "FILE:LINE: Failure", then Expression/Evaluated lines. */
static inline OD_UNUSED void od_v2_failure(const char *file, int line, const char *expr) {
  MicroPrintf("%s:%d: Failure", file, line);
  MicroPrintf("  Expression:  %s", expr);
  od_case_failed = 1;
}

#define OD_V2_BOOL(x, want, on_fail)                                          \
  do {                                                                        \
    if (!(x) != !(want)) {                                                    \
      od_v2_failure(__FILE__, __LINE__, #x);                                  \
      MicroPrintf("  Evaluated:   %s", (want) ? "false" : "true");            \
      on_fail;                                                                \
    }                                                                         \
  } while (0)

#define OD_V2_CMP(x, y, op, on_fail)                                                  \
  do {                                                                                \
    OD_LET(od_vx, x);                                                                 \
    OD_LET(od_vy, y);                                                                 \
    if (!(od_vx op od_vy)) {                                                          \
      od_v2_failure(__FILE__, __LINE__, #x " " #op " " #y);                           \
      od_print_pair("  Evaluated:   %s " #op " %s", OD_VALUE(od_vx), OD_VALUE(od_vy)); \
      on_fail;                                                                        \
    }                                                                                 \
  } while (0)

#define OD_V2_NEAR(x, y, eps, on_fail)                                                   \
  do {                                                                                   \
    double od_dx = (double)(x), od_dy = (double)(y), od_de = (double)(eps);              \
    if (!(od_absdiff(od_dx, od_dy) <= od_de)) {                                          \
      od_v2_failure(__FILE__, __LINE__, "|" #x " - " #y "| <= " #eps);                   \
      MicroPrintf("  Evaluated:   |%f - %f| <= %f", od_dx, od_dy, od_de);                \
      on_fail;                                                                           \
    }                                                                                    \
  } while (0)

#define OD_V2_STREQ(x, y, want, optext, on_fail)                             \
  do {                                                                       \
    const char *od_s1 = (x), *od_s2 = (y);                                   \
    if (od_streq(od_s1, od_s2) != (want)) {                                  \
      od_v2_failure(__FILE__, __LINE__, #x " " optext " " #y);               \
      MicroPrintf("  Evaluated:   \"%s\" vs \"%s\"", od_s1, od_s2);          \
      on_fail;                                                               \
    }                                                                        \
  } while (0)

#define OD_CONTINUE ((void)0)
#define OD_RETURN return

#define EXPECT_TRUE(x) OD_V2_BOOL(x, 1, OD_CONTINUE)
#define EXPECT_FALSE(x) OD_V2_BOOL(x, 0, OD_CONTINUE)
#define EXPECT_EQ(x, y) OD_V2_CMP(x, y, ==, OD_CONTINUE)
#define EXPECT_NE(x, y) OD_V2_CMP(x, y, !=, OD_CONTINUE)
#define EXPECT_GT(x, y) OD_V2_CMP(x, y, >, OD_CONTINUE)
#define EXPECT_GE(x, y) OD_V2_CMP(x, y, >=, OD_CONTINUE)
#define EXPECT_LT(x, y) OD_V2_CMP(x, y, <, OD_CONTINUE)
#define EXPECT_LE(x, y) OD_V2_CMP(x, y, <=, OD_CONTINUE)
#define EXPECT_NEAR(x, y, eps) OD_V2_NEAR(x, y, eps, OD_CONTINUE)
#define EXPECT_FLOAT_EQ(x, y) OD_V2_NEAR(x, y, 1e-6 * (od_absdiff((double)(x), 0) + 1), OD_CONTINUE)
#define EXPECT_STREQ(x, y) OD_V2_STREQ(x, y, 1, "==", OD_CONTINUE)
#define EXPECT_STRNE(x, y) OD_V2_STREQ(x, y, 0, "!=", OD_CONTINUE)

#define ASSERT_TRUE(x) OD_V2_BOOL(x, 1, OD_RETURN)
#define ASSERT_FALSE(x) OD_V2_BOOL(x, 0, OD_RETURN)
#define ASSERT_EQ(x, y) OD_V2_CMP(x, y, ==, OD_RETURN)
#define ASSERT_NE(x, y) OD_V2_CMP(x, y, !=, OD_RETURN)
#define ASSERT_GT(x, y) OD_V2_CMP(x, y, >, OD_RETURN)
#define ASSERT_GE(x, y) OD_V2_CMP(x, y, >=, OD_RETURN)
#define ASSERT_LT(x, y) OD_V2_CMP(x, y, <, OD_RETURN)
#define ASSERT_LE(x, y) OD_V2_CMP(x, y, <=, OD_RETURN)
#define ASSERT_NEAR(x, y, eps) OD_V2_NEAR(x, y, eps, OD_RETURN)
#define ASSERT_STREQ(x, y) OD_V2_STREQ(x, y, 1, "==", OD_RETURN)

#define ADD_FAILURE()                                   \
  do {                                                  \
    MicroPrintf("%s:%d: Failure", __FILE__, __LINE__);  \
    od_case_failed = 1;                                 \
  } while (0)
#define FAIL()                                          \
  do {                                                  \
    ADD_FAILURE();                                      \
    return;                                             \
  } while (0)

/* Skips the running v2 case; prints the reason as an extension line. */
#define ONDEVICE_SKIP(reason)                        \
  do {                                               \
    MicroPrintf("#ondevice skip %s", (reason));      \
    od_case_skipped = 1;                             \
    return;                                          \
  } while (0)
#define GTEST_SKIP() ONDEVICE_SKIP("")


/* ---- Latency: ONDEVICE_BENCH ------------------------------------------------------
 *   ONDEVICE_BENCH("gemm_int8", 32 * 32 * 32, 20) { gemm_s8(a, b, c, 32, 32, 32); }
 * runs the body `repeats` times, reads the board's cycle source around each run and prints
 *   #ondevice bench name=gemm_int8 unit=systick repeats=20 min=.. median=.. max=.. work=32768
 *   work_unit=MAC overhead=.. batch=1 q3=..
 * The runtime supplies the source (boards/runtime/...: SysTick or DWT on Cortex-M,
 * CLOCK_MONOTONIC on Linux); the host turns its unit into cycles, instructions or ns from
 * the board file, never from a runtime clock rate. `overhead` is the cost of the
 * measurement itself (an empty body), already subtracted from every sample; q3 is the
 * upper quartile of the samples (how far above its best a run strays: the host's noise model).
 *
 * On a wall clock (unit ns: Linux, the host) one run of a small kernel is shorter than the
 * clock's noise, and a handful of runs all fall in the same moment of the machine: each
 * sample is a batch of `batch` runs of the body lasting at least ONDEVICE_BENCH_MIN_SAMPLE_NS
 * (found by doubling the batch, which also warms the core up), and at least
 * ONDEVICE_BENCH_MIN_REPEATS_WALL samples are taken, as Google Benchmark and pytest-benchmark
 * do. min, median and max are then of whole batches; the host divides them by `batch`.
 * A counter of instructions or cycles (bare metal) is measured one run per sample,
 * `repeats` samples, exactly as written: between its two reads, only the body. */
#ifdef __cplusplus
extern "C" {
#endif
void ondevice_cycles_init(void);
uint64_t ondevice_cycles(void);     /* counts up; wraps at ondevice_cycles_mask */
extern const uint64_t ondevice_cycles_mask;
extern const char ondevice_cycles_unit[]; /* "systick", "dwt", "mcycle" or "ns" */
#ifdef __cplusplus
}
#endif

#ifndef ONDEVICE_BENCH_MAX_REPEATS
#define ONDEVICE_BENCH_MAX_REPEATS 64
#endif
#ifndef ONDEVICE_BENCH_WORK_UNIT
#define ONDEVICE_BENCH_WORK_UNIT "MAC"
#endif
#ifndef ONDEVICE_BENCH_MIN_SAMPLE_NS /* a wall-clock sample lasts at least this (ns) */
#define ONDEVICE_BENCH_MIN_SAMPLE_NS 500000
#endif
#ifndef ONDEVICE_BENCH_MIN_REPEATS_WALL /* samples at least, on a wall clock: enough to see the spread */
#define ONDEVICE_BENCH_MIN_REPEATS_WALL 64
#endif
#define OD_BENCH_MAX_BATCH 0x40000000u
#if defined(__linux__) || defined(__APPLE__) || defined(__unix__)
#define OD_BENCH_WALL 1 /* a hosted runtime's source is CLOCK_MONOTONIC: a wall clock, in ns */
#endif

/* A build that instruments the code under test (a sanitizer) measures that instrumentation
 * too: its records say so (variant=...), and the host never compares them with a plain
 * build's. --ondevice-coverage (gcov) is known to the host, which built it. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(hwaddress_sanitizer)
#define OD_BENCH_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define OD_BENCH_TSAN 1
#endif
#if __has_feature(memory_sanitizer)
#define OD_BENCH_MSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_HWADDRESS__) || defined(OD_BENCH_ASAN)
#define OD_BENCH_VARIANT " variant=asan"
#elif defined(__SANITIZE_THREAD__) || defined(OD_BENCH_TSAN)
#define OD_BENCH_VARIANT " variant=tsan"
#elif defined(OD_BENCH_MSAN)
#define OD_BENCH_VARIANT " variant=msan"
#else
#define OD_BENCH_VARIANT ""
#endif

typedef struct {
  const char *name;
  unsigned long long work;
  int repeats;
  int i;
  uint32_t batch;   /* runs of the body per sample */
  uint32_t left;    /* runs of the body still to come in this sample (or this trial batch) */
  int growing;      /* 1: trial batches, doubled until one lasts ONDEVICE_BENCH_MIN_SAMPLE_NS */
  uint64_t start;
  uint64_t overhead;
  uint64_t *samples; /* od_bench_samples: a v1 case's locals live in main's frame, shared by every case */
} od_bench_t;
/* one bench runs at a time; its samples are kept off the stack, where they counted in every
 * case's stack figure */
static OD_UNUSED uint64_t od_bench_samples[ONDEVICE_BENCH_MAX_REPEATS];

/* A compiler barrier: the body's work (even on static data) stays between the two reads. */
#if defined(__GNUC__) || defined(__clang__)
#define OD_BARRIER() __asm__ volatile("" ::: "memory")
#else
#define OD_BARRIER()
#endif

/* ONDEVICE_KEEP(c): the compiler must assume c's memory is read here, so a bench body whose
 * results are never checked is not optimised away (like Google Benchmark's DoNotOptimize). */
#if defined(__GNUC__) || defined(__clang__)
#define ONDEVICE_KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")
#else
#define ONDEVICE_KEEP(p) ((void)(p))
#endif

static inline OD_UNUSED int od_bench_step(od_bench_t *b) {
  uint64_t now;
  OD_BARRIER();
  now = ondevice_cycles();
  if (b->i >= 0) b->samples[b->i] = (now - b->start) & ondevice_cycles_mask;
  if (++b->i >= b->repeats) return 0;
  b->start = ondevice_cycles();
  OD_BARRIER();
  return 1;
}

#ifdef OD_BENCH_WALL
/* A trial batch has ended (or none has begun): 1 to run the next one, 0 once the batch is
 * long enough to measure. The first trial runs the body once. */
static inline OD_UNUSED int od_bench_grow(od_bench_t *b) {
  uint64_t took;
  OD_BARRIER();
  took = (ondevice_cycles() - b->start) & ondevice_cycles_mask;
  if (b->left == 1) { /* a trial just ended */
    if (took >= ONDEVICE_BENCH_MIN_SAMPLE_NS || b->batch >= OD_BENCH_MAX_BATCH) {
      b->growing = 0;
      return 0;
    }
    b->batch *= 2;
  }
  b->left = b->batch;
  b->start = ondevice_cycles();
  OD_BARRIER();
  return 1;
}
#endif

static inline OD_UNUSED od_bench_t od_bench_begin(const char *name, unsigned long long work, int repeats) {
  od_bench_t b;
  int k;
  b.samples = od_bench_samples;
  ondevice_cycles_init();
  /* calibration: the same loop with an empty body; its fastest run is the overhead */
  b.repeats = 8;
  b.i = -1;
  b.start = 0;
  while (od_bench_step(&b)) {
  }
  b.overhead = b.samples[1];
  for (k = 1; k < 8; ++k)
    if (b.samples[k] < b.overhead) b.overhead = b.samples[k];
  b.name = name;
  b.work = work;
  b.batch = 1;
  b.left = 0;
#ifdef OD_BENCH_WALL
  b.growing = ONDEVICE_BENCH_MIN_SAMPLE_NS > 0; /* 0: one run of the body per sample, as on a counter */
  if (repeats < ONDEVICE_BENCH_MIN_REPEATS_WALL) repeats = ONDEVICE_BENCH_MIN_REPEATS_WALL;
#else
  b.growing = 0;
#endif
  b.repeats = repeats < 1 ? 1 : repeats > ONDEVICE_BENCH_MAX_REPEATS ? ONDEVICE_BENCH_MAX_REPEATS : repeats;
  b.i = -1;
  return b;
}

static inline OD_UNUSED void od_bench_report(od_bench_t *b) {
  int i, j;
  uint64_t v;
  for (i = 0; i < b->repeats; ++i) b->samples[i] = b->samples[i] > b->overhead ? b->samples[i] - b->overhead : 0;
  for (i = 1; i < b->repeats; ++i) { /* insertion sort: no heap, few samples */
    v = b->samples[i];
    for (j = i; j > 0 && b->samples[j - 1] > v; --j) b->samples[j] = b->samples[j - 1];
    b->samples[j] = v;
  }
  MicroPrintf("#ondevice bench name=%s unit=%s repeats=%d min=%llu median=%llu max=%llu work=%llu "
              "work_unit=%s overhead=%llu batch=%lu q3=%llu%s",
              b->name, ondevice_cycles_unit, b->repeats, (unsigned long long)b->samples[0],
              (unsigned long long)b->samples[b->repeats / 2], (unsigned long long)b->samples[b->repeats - 1],
              b->work, ONDEVICE_BENCH_WORK_UNIT, (unsigned long long)b->overhead, (unsigned long)b->batch,
              (unsigned long long)b->samples[3 * (b->repeats - 1) / 4], OD_BENCH_VARIANT);
}

/* Before each run of the body: 1 to run it (again), 0 when the bench is done and printed. */
static inline OD_UNUSED int od_bench_next(od_bench_t *b) {
#ifdef OD_BENCH_WALL
  if (b->left > 1) {
    --b->left;
    return 1;
  }
  if (b->growing && od_bench_grow(b)) return 1;
  if (od_bench_step(b)) {
    b->left = b->batch;
    return 1;
  }
#else /* a counter: between the two reads, the body alone, as the empty-body calibration measured */
  if (od_bench_step(b)) return 1;
#endif
  od_bench_report(b);
  return 0;
}

#ifdef ONDEVICE_BENCH_DISABLE /* --bench-disable: the body runs once, as a plain test */
#define ONDEVICE_BENCH(name, work, repeats) for (int od_bench_once_ = 1; od_bench_once_; od_bench_once_ = 0)
#else
#define ONDEVICE_BENCH(name, work, repeats)                                                  \
  for (od_bench_t od_bench_ = od_bench_begin((name), (unsigned long long)(work), (repeats)); \
       od_bench_next(&od_bench_);)
#endif

/* ---- CUDA: results checked on the host, kernels timed on the GPU --------------------
 *   ONDEVICE_CUDA_EXPECT_OK(cudaMemcpy(...));   a CUDA call that must succeed, named if not
 *   ONDEVICE_CUDA_BENCH("gemm_tiled_64", 64 * 64 * 64, 20) { gemm<<<grid, block>>>(...); }
 * The bench runs the body once to warm up, then `repeats` times, each between two CUDA
 * events on the default stream (the GPU's own clock, not the host's), and prints the
 * usual record in ns; a launch that fails fails the case, naming the CUDA error. */
#ifdef __CUDACC__
#define ONDEVICE_CUDA_EXPECT_OK(call)                                                      \
  do {                                                                                     \
    cudaError_t od_cuda_e_ = (call);                                                       \
    if (od_cuda_e_ != cudaSuccess) {                                                       \
      MicroPrintf(#call " failed at %s:%d: %s: %s", __FILE__, __LINE__,                    \
                  cudaGetErrorName(od_cuda_e_), cudaGetErrorString(od_cuda_e_));           \
      od_case_failed = 1;                                                                  \
    }                                                                                      \
  } while (0)

typedef struct {
  const char *name;
  unsigned long long work;
  int repeats;
  int i;
  cudaEvent_t start, stop;
  uint64_t samples[ONDEVICE_BENCH_MAX_REPEATS];
} od_cuda_bench_t;

static inline OD_UNUSED od_cuda_bench_t od_cuda_bench_begin(const char *name, unsigned long long work, int repeats) {
  od_cuda_bench_t b;
  b.name = name;
  b.work = work;
  b.repeats = repeats < 1 ? 1 : repeats > ONDEVICE_BENCH_MAX_REPEATS ? ONDEVICE_BENCH_MAX_REPEATS : repeats;
  b.i = -2; /* -1: the warm-up run */
  cudaEventCreate(&b.start);
  cudaEventCreate(&b.stop);
  return b;
}

static inline OD_UNUSED int od_cuda_bench_next(od_cuda_bench_t *b, const char *file, int line) {
  int i, j;
  float ms = 0;
  uint64_t v;
  cudaError_t e;
  if (b->i >= 0) cudaEventRecord(b->stop, 0);
  e = b->i >= -1 ? cudaDeviceSynchronize() : cudaSuccess;
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    MicroPrintf("ONDEVICE_CUDA_BENCH(\"%s\") failed at %s:%d: %s: %s", b->name, file, line, cudaGetErrorName(e),
                cudaGetErrorString(e));
    od_case_failed = 1;
    cudaEventDestroy(b->start);
    cudaEventDestroy(b->stop);
    return 0;
  }
  if (b->i >= 0) {
    cudaEventElapsedTime(&ms, b->start, b->stop);
    b->samples[b->i] = (uint64_t)(ms * 1e6f + 0.5f);
  }
  if (++b->i < b->repeats) {
    if (b->i >= 0) cudaEventRecord(b->start, 0);
    return 1;
  }
  cudaEventDestroy(b->start);
  cudaEventDestroy(b->stop);
  for (i = 1; i < b->repeats; ++i) {
    v = b->samples[i];
    for (j = i; j > 0 && b->samples[j - 1] > v; --j) b->samples[j] = b->samples[j - 1];
    b->samples[j] = v;
  }
  MicroPrintf("#ondevice bench name=%s unit=ns repeats=%d min=%llu median=%llu max=%llu work=%llu "
              "work_unit=%s overhead=0",
              b->name, b->repeats, (unsigned long long)b->samples[0], (unsigned long long)b->samples[b->repeats / 2],
              (unsigned long long)b->samples[b->repeats - 1], b->work, ONDEVICE_BENCH_WORK_UNIT);
  return 0;
}

#ifdef ONDEVICE_BENCH_DISABLE
#define ONDEVICE_CUDA_BENCH(name, work, repeats) for (int od_bench_once_ = 1; od_bench_once_; od_bench_once_ = 0)
#else
#define ONDEVICE_CUDA_BENCH(name, work, repeats)                                                      \
  for (od_cuda_bench_t od_cuda_bench_ = od_cuda_bench_begin((name), (unsigned long long)(work), (repeats)); \
       od_cuda_bench_next(&od_cuda_bench_, __FILE__, __LINE__);)
#endif
#endif /* __CUDACC__ */

#endif /* PYTEST_ONDEVICE_MICRO_TEST_H_ */
