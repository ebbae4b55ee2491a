#include "gemm_cuda.h"

__global__ static void naive_kernel(const float *a, const float *b, float *c, int m, int n, int k) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) sum += a[row * k + i] * b[i * n + col];
  c[row * n + col] = sum;
}

__global__ static void tiled_kernel(const float *a, const float *b, float *c, int m, int n, int k) {
  __shared__ float ta[GEMM_TILE][GEMM_TILE];
  __shared__ float tb[GEMM_TILE][GEMM_TILE];
  int row = blockIdx.y * GEMM_TILE + threadIdx.y;
  int col = blockIdx.x * GEMM_TILE + threadIdx.x;
  float sum = 0.0f;
  for (int t = 0; t < k; t += GEMM_TILE) {
    int ak = t + threadIdx.x, bk = t + threadIdx.y;
    ta[threadIdx.y][threadIdx.x] = row < m && ak < k ? a[row * k + ak] : 0.0f;
    tb[threadIdx.y][threadIdx.x] = bk < k && col < n ? b[bk * n + col] : 0.0f;
    __syncthreads();
    for (int i = 0; i < GEMM_TILE; ++i) sum += ta[threadIdx.y][i] * tb[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = sum;
}

static dim3 grid_for(int m, int n) { return dim3((n + GEMM_TILE - 1) / GEMM_TILE, (m + GEMM_TILE - 1) / GEMM_TILE); }

void gemm_f32_naive(const float *a, const float *b, float *c, int m, int n, int k) {
  naive_kernel<<<grid_for(m, n), dim3(GEMM_TILE, GEMM_TILE)>>>(a, b, c, m, n, k);
}

void gemm_f32_tiled(const float *a, const float *b, float *c, int m, int n, int k) {
  tiled_kernel<<<grid_for(m, n), dim3(GEMM_TILE, GEMM_TILE)>>>(a, b, c, m, n, k);
}
