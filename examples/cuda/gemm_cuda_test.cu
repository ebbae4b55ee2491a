// Both GEMM kernels against a CPU reference on several shapes (tile edges included), and
// their latency on the GPU (CUDA events). Without a usable GPU every case is an error that
// names the device and the CUDA error, never a pass (docs/cuda.md).
#include <math.h>
#include <stdlib.h>

#include "gemm_cuda.h"
#include "micro_test.h"

typedef void (*gemm_fn)(const float *, const float *, float *, int, int, int);

struct Shape {
  int m, n, k;
};
static const Shape kShapes[] = {{1, 1, 1}, {16, 16, 16}, {33, 17, 65}, {64, 64, 64}, {100, 70, 130}};

static void fill(float *x, int count, unsigned seed) {
  for (int i = 0; i < count; ++i) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;  // [-1, 1]
  }
}

static void reference(const float *a, const float *b, float *c, int m, int n, int k) {
  for (int r = 0; r < m; ++r)
    for (int col = 0; col < n; ++col) {
      double sum = 0;
      for (int i = 0; i < k; ++i) sum += (double)a[r * k + i] * b[i * n + col];
      c[r * n + col] = (float)sum;
    }
}

// The largest difference from the CPU reference over every shape (-1: a CUDA call failed)
static float worst_error(gemm_fn gemm) {
  float worst = 0.0f;
  for (const Shape &s : kShapes) {
    size_t na = (size_t)s.m * s.k, nb = (size_t)s.k * s.n, nc = (size_t)s.m * s.n;
    float *a = (float *)malloc(na * sizeof(float)), *b = (float *)malloc(nb * sizeof(float));
    float *want = (float *)malloc(nc * sizeof(float)), *got = (float *)malloc(nc * sizeof(float));
    float *da = nullptr, *db = nullptr, *dc = nullptr;
    fill(a, (int)na, 1u + s.m);
    fill(b, (int)nb, 7u + s.n);
    reference(a, b, want, s.m, s.n, s.k);
    ONDEVICE_CUDA_EXPECT_OK(cudaMalloc(&da, na * sizeof(float)));
    ONDEVICE_CUDA_EXPECT_OK(cudaMalloc(&db, nb * sizeof(float)));
    ONDEVICE_CUDA_EXPECT_OK(cudaMalloc(&dc, nc * sizeof(float)));
    ONDEVICE_CUDA_EXPECT_OK(cudaMemcpy(da, a, na * sizeof(float), cudaMemcpyHostToDevice));
    ONDEVICE_CUDA_EXPECT_OK(cudaMemcpy(db, b, nb * sizeof(float), cudaMemcpyHostToDevice));
    gemm(da, db, dc, s.m, s.n, s.k);
    ONDEVICE_CUDA_EXPECT_OK(cudaGetLastError());
    ONDEVICE_CUDA_EXPECT_OK(cudaMemcpy(got, dc, nc * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < nc; ++i) worst = fmaxf(worst, fabsf(got[i] - want[i]));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    free(a);
    free(b);
    free(want);
    free(got);
  }
  return worst;
}

struct DeviceBuffers {
  float *a, *b, *c;
};

static DeviceBuffers zeroed(int size) {
  size_t bytes = (size_t)size * size * sizeof(float);
  DeviceBuffers d = {nullptr, nullptr, nullptr};
  ONDEVICE_CUDA_EXPECT_OK(cudaMalloc(&d.a, bytes));
  ONDEVICE_CUDA_EXPECT_OK(cudaMalloc(&d.b, bytes));
  ONDEVICE_CUDA_EXPECT_OK(cudaMalloc(&d.c, bytes));
  ONDEVICE_CUDA_EXPECT_OK(cudaMemset(d.a, 0, bytes));
  ONDEVICE_CUDA_EXPECT_OK(cudaMemset(d.b, 0, bytes));
  return d;
}

static void release(DeviceBuffers d) {
  cudaFree(d.a);
  cudaFree(d.b);
  cudaFree(d.c);
}

TF_LITE_MICRO_TESTS_BEGIN

TF_LITE_MICRO_TEST(NaiveMatchesTheCpuOnAllShapes) { TF_LITE_MICRO_EXPECT_NEAR(worst_error(gemm_f32_naive), 0.0f, 1e-4f); }

TF_LITE_MICRO_TEST(TiledMatchesTheCpuOnAllShapes) { TF_LITE_MICRO_EXPECT_NEAR(worst_error(gemm_f32_tiled), 0.0f, 1e-4f); }

// the work is the MACs: 256^3
TF_LITE_MICRO_TEST(BenchGemmF32Naive256) {
  DeviceBuffers d = zeroed(256);
  ONDEVICE_CUDA_BENCH("gemm_f32_naive_256", 256ull * 256 * 256, 20) { gemm_f32_naive(d.a, d.b, d.c, 256, 256, 256); }
  release(d);
}

TF_LITE_MICRO_TEST(BenchGemmF32Tiled256) {
  DeviceBuffers d = zeroed(256);
  ONDEVICE_CUDA_BENCH("gemm_f32_tiled_256", 256ull * 256 * 256, 20) { gemm_f32_tiled(d.a, d.b, d.c, 256, 256, 256); }
  release(d);
}

TF_LITE_MICRO_TESTS_END
