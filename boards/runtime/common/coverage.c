/* --ondevice-coverage on bare metal: gcov's counts go home over the output, not a file.
 *
 * Linked only into covered builds, and never instrumented itself. The objects under test
 * are compiled with -fprofile-info-section=ondevice_gcov_info: instead of a constructor
 * that registers each object's gcov_info for a file write at exit (there is no file
 * system), the linker gathers pointers to them in that section. Our header calls
 * ondevice_coverage_dump() before its closing summary, so the summary vouches that every
 * file arrived; libgcov's __gcov_info_to_gcda turns each gcov_info into the bytes of its
 * .gcda file, sent as stamped lines (docs/protocol.md):
 *
 *   #ondevice NONCE gcda NAME            a file begins (NAME: the .gcda's base name)
 *   #ondevice NONCE gcdata BASE64        up to 180 of its bytes
 *   #ondevice NONCE gcda-end BYTES CRC   its length and CRC-32 (hex): the host checks both
 */
#include <gcov.h>
#include <stddef.h>
#include <stdint.h>

#include "put.h"

void ondevice_write(const char *data, size_t len);

extern const struct gcov_info *const __start_ondevice_gcov_info[] __attribute__((weak));
extern const struct gcov_info *const __stop_ondevice_gcov_info[] __attribute__((weak));

#define LINE_BYTES 180 /* 240 characters of base64: the stamp costs less per byte */

static const char *nonce_of_run;
static int dumped;
static unsigned char pending[LINE_BYTES];
static unsigned pending_len;
static uint32_t file_bytes, file_crc;

/* __gcov_info_to_gcda asks for memory only for value profiles, which --coverage does not
 * make; a fixed pool answers if a toolchain asks anyway. */
static unsigned char pool[128] __attribute__((aligned(8)));
static unsigned pool_used;

static void emit(const char *kind, const char *body, size_t body_len) {
  char line[300];
  char *p = put_str(line, "#ondevice ");
  if (nonce_of_run) p = put_str(put_str(p, nonce_of_run), " ");
  p = put_str(put_str(p, kind), " ");
  for (size_t i = 0; i < body_len && p < line + sizeof line - 2; i++) *p++ = body[i];
  *p++ = '\n';
  ondevice_write(line, (size_t)(p - line));
}

static void flush_pending(void) {
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char text[LINE_BYTES / 3 * 4 + 4];
  size_t n = 0;
  for (unsigned i = 0; i < pending_len; i += 3) {
    uint32_t v = (uint32_t)pending[i] << 16;
    if (i + 1 < pending_len) v |= (uint32_t)pending[i + 1] << 8;
    if (i + 2 < pending_len) v |= pending[i + 2];
    text[n++] = digits[(v >> 18) & 63];
    text[n++] = digits[(v >> 12) & 63];
    text[n++] = i + 1 < pending_len ? digits[(v >> 6) & 63] : '=';
    text[n++] = i + 2 < pending_len ? digits[v & 63] : '=';
  }
  if (n) emit("gcdata", text, n);
  pending_len = 0;
}

static void on_filename(const char *name, void *arg) {
  (void)arg;
  const char *base = name ? name : "unnamed.gcda";
  for (const char *p = base; *p; p++)
    if (*p == '/' || *p == '\\') base = p + 1;
  size_t len = 0;
  while (base[len]) len++;
  emit("gcda", base, len);
  file_bytes = 0;
  file_crc = 0xffffffffu;
}

static void on_data(const void *data, unsigned len, void *arg) {
  (void)arg;
  const unsigned char *p = data;
  for (unsigned i = 0; i < len; i++) {
    file_crc ^= p[i];
    for (int k = 0; k < 8; k++) file_crc = (file_crc >> 1) ^ (0xedb88320u & (0u - (file_crc & 1u)));
    pending[pending_len++] = p[i];
    if (pending_len == LINE_BYTES) flush_pending();
  }
  file_bytes += len;
}

static void *on_allocate(unsigned len, void *arg) {
  (void)arg;
  len = (len + 7u) & ~7u;
  if (len > sizeof pool - pool_used) return NULL;
  pool_used += len;
  return pool + pool_used - len;
}

void ondevice_coverage_dump(const char *nonce) {
  nonce_of_run = nonce;
  dumped = 1;
  for (const struct gcov_info *const *info = __start_ondevice_gcov_info; info < __stop_ondevice_gcov_info; info++) {
    if (!*info) continue;
    __gcov_info_to_gcda(*info, on_filename, on_data, on_allocate, NULL);
    flush_pending();
    char end[24];
    char *p = put_digits(put_str(put_dec(end, file_bytes), " "), file_crc ^ 0xffffffffu, 8);
    emit("gcda-end", end, (size_t)(p - end));
    pool_used = 0;
  }
}

/* A harness without our markers (TFLM's own header) never calls the dump: the program's
 * exit does, unstamped, as that run's other lines are. */
void ondevice_coverage_at_exit(void) {
  if (!dumped) ondevice_coverage_dump(NULL);
}
