/* On-device inference as a product ships it: the model is a file pushed to the device,
 * not compiled in. Loads an int8 two-layer MLP (pack_model.py writes the file), runs it on
 * one input and prints the top class, the logits and the median latency of N runs.
 *   infer MODEL INPUT [RUNS]  ->  "top: K", "logits: ...", "latency_us: X" */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm.h"

typedef struct {
  char magic[4]; /* "MLP1" */
  int32_t in, hidden, out;
  int32_t in_zp, hidden_zp, out_zp;
  int32_t m1, s1, m2, s2;
} Header;

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *data = malloc((size_t)n);
  if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return data;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: infer MODEL INPUT [RUNS]\n");
    return 2;
  }
  size_t model_size, input_size;
  uint8_t *model = read_file(argv[1], &model_size);
  int8_t *input = read_file(argv[2], &input_size);
  if (!model || !input || model_size < sizeof(Header)) {
    fprintf(stderr, "infer: cannot read %s\n", !model || model_size < sizeof(Header) ? argv[1] : argv[2]);
    return 2;
  }
  Header h;
  memcpy(&h, model, sizeof h);
  size_t need = sizeof h + (size_t)h.hidden * h.in + 4u * h.hidden + (size_t)h.out * h.hidden + 4u * h.out;
  if (memcmp(h.magic, "MLP1", 4) != 0 || model_size != need || input_size != (size_t)h.in) {
    fprintf(stderr, "infer: %s is not an MLP1 model for this input (%zu bytes, %zu expected)\n", argv[1],
            model_size, need);
    return 2;
  }
  const int8_t *w1 = (const int8_t *)(model + sizeof h);
  const int32_t *b1 = (const int32_t *)(w1 + h.hidden * h.in);
  const int8_t *w2 = (const int8_t *)(b1 + h.hidden);
  const int32_t *b2 = (const int32_t *)(w2 + h.out * h.hidden);
  int8_t *hidden = malloc((size_t)h.hidden), *logits = malloc((size_t)h.out);
  const GemmS8Params l1 = {1, h.hidden, h.in, -h.in_zp, h.hidden_zp, h.m1, h.s1, h.hidden_zp, 127};
  const GemmS8Params l2 = {1, h.out, h.hidden, -h.hidden_zp, h.out_zp, h.m2, h.s2, -128, 127};
  int runs = argc > 3 ? atoi(argv[3]) : 20;
  if (runs < 1) runs = 1;
  double *took = malloc(sizeof(double) * (size_t)runs);
  for (int r = 0; r < runs; ++r) {
    double start = now_us();
    gemm_s8_opt(&l1, input, w1, b1, hidden);
    gemm_s8_opt(&l2, hidden, w2, b2, logits);
    took[r] = now_us() - start;
  }
  qsort(took, (size_t)runs, sizeof(double), by_value);
  int top = 0;
  for (int j = 1; j < h.out; ++j)
    if (logits[j] > logits[top]) top = j;
  printf("top: %d\nlogits:", top);
  for (int j = 0; j < h.out; ++j) printf(" %d", logits[j]);
  printf("\nlatency_us: %.2f\n", took[runs / 2]);
  return 0;
}
