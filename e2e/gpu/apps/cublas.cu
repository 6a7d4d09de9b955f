// A cuBLAS program for the GPU suite: level-1 routines, SGEMM at three
// sizes and a BF16 GEMM large enough for cuBLASLt's Hopper kernels (which
// launch with thread-block clusters), each checked against a plain CUDA
// kernel computing the same product, and an FNV-1a hash of every result
// that must be identical natively and through gpuctl.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_));               \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)
#define CB(x)                                                                                     \
  do {                                                                                            \
    cublasStatus_t s_ = (x);                                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                            \
      std::printf("%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, (int)s_);              \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

// ref computes C = A·B (column-major, n×n) in FP32, one thread per element.
template <typename T>
__global__ void ref(int n, const T *a, const T *b, float *c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
  if (i >= n) return;
  float s = 0;
  for (int k = 0; k < n; k++) s += (float)a[k * n + i] * (float)b[j * n + k];
  c[j * n + i] = s;
}

static uint64_t fnv(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static uint32_t lcg = 12345;
static float next() {  // small integers: products and sums are exact in FP32
  lcg = lcg * 1664525u + 1013904223u;
  return (float)((int)(lcg >> 28) - 8);
}

// gemm multiplies two n×n matrices of T with cuBLAS and with ref, and
// returns the largest difference.
template <typename T>
static double gemm(cublasHandle_t h, int n, const char *name) {
  std::vector<T> a(n * n), b(n * n);
  for (auto &v : a) v = (T)next();
  for (auto &v : b) v = (T)next();
  T *da, *db;
  float *dc, *dr;
  CK(cudaMalloc(&da, n * n * sizeof(T)));
  CK(cudaMalloc(&db, n * n * sizeof(T)));
  CK(cudaMalloc(&dc, n * n * sizeof(float)));
  CK(cudaMalloc(&dr, n * n * sizeof(float)));
  CK(cudaMemcpy(da, a.data(), n * n * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.data(), n * n * sizeof(T), cudaMemcpyHostToDevice));
  float one = 1, zero = 0;
  cudaDataType t = sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_16BF;
  CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, t, n, db, t, n, &zero, dc, CUDA_R_32F, n,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  ref<T><<<dim3((n + 127) / 128, n), 128>>>(n, da, db, dr);
  CK(cudaGetLastError());
  std::vector<float> c(n * n), r(n * n);
  CK(cudaMemcpy(c.data(), dc, n * n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), dr, n * n * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int i = 0; i < n * n; i++) worst = std::fmax(worst, std::fabs((double)c[i] - r[i]));
  std::printf("%s n=%d max|cublas-ref|=%g hash=%016llx\n", name, n, worst, (unsigned long long)fnv(c.data(), c.size() * 4));
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dc));
  CK(cudaFree(dr));
  return worst;
}

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  const int n = 1 << 16;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; i++) x[i] = next(), y[i] = next();
  float *dx, *dy;
  CK(cudaMalloc(&dx, n * 4));
  CK(cudaMalloc(&dy, n * 4));
  CB(cublasSetVector(n, 4, x.data(), 1, dx, 1));
  CB(cublasSetVector(n, 4, y.data(), 1, dy, 1));
  float alpha = 3, dot = 0;
  CB(cublasSaxpy(h, n, &alpha, dx, 1, dy, 1));
  CB(cublasSdot(h, n, dx, 1, dy, 1, &dot));
  CB(cublasGetVector(n, 4, dy, 1, y.data(), 1));
  double want = 0;
  for (int i = 0; i < n; i++) want += (double)x[i] * y[i];
  std::printf("saxpy+sdot dot=%.1f want=%.1f\n", dot, want);
  bool ok = dot == (float)want;
  // Small integer inputs keep every FP32 product exact, so cuBLAS and the
  // reference agree exactly for SGEMM; BF16 inputs are exact too.
  ok &= gemm<float>(h, 64, "sgemm") == 0;
  ok &= gemm<float>(h, 1024, "sgemm") == 0;
  ok &= gemm<float>(h, 4096, "sgemm") == 0;
  ok &= gemm<__nv_bfloat16>(h, 4096, "bf16gemm") == 0;
  CB(cublasDestroy(h));
  std::printf(ok ? "cublas ok\n" : "cublas FAILED\n");
  return ok ? 0 : 1;
}
