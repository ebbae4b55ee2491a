// Two CUDA float GEMM kernels, C[M x N] = A[M x K] * B[K x N], row-major, on the GPU's memory:
// a naive one (a thread per element of C, reading A and B from global memory) and a tiled
// one (16 x 16 tiles staged through shared memory). The launches are host functions.
#ifndef EXAMPLES_CUDA_GEMM_CUDA_H_
#define EXAMPLES_CUDA_GEMM_CUDA_H_

#define GEMM_TILE 16

void gemm_f32_naive(const float *a, const float *b, float *c, int m, int n, int k);
void gemm_f32_tiled(const float *a, const float *b, float *c, int m, int n, int k);

#endif  // EXAMPLES_CUDA_GEMM_CUDA_H_
