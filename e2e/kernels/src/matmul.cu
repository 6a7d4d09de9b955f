// Matrix multiply, row-major: C[M x N] = A[M x K] * B[K x N].

#define TILE 16

// matmul_tiled: 16x16 tiles in static shared memory. Block (16,16),
// grid (ceil(N/16), ceil(M/16)).
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
        Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}

// matmul_dyn: the tile edge is blockDim.x (== blockDim.y); both tiles live in
// dynamic shared memory of 2*tile*tile*4 bytes.
extern "C" __global__ void matmul_dyn(const float* A, const float* B, float* C, int M, int N, int K)
{
    extern __shared__ float tiles[];
    int tile = blockDim.x;
    float* As = tiles;
    float* Bs = tiles + tile * tile;
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int row = blockIdx.y * tile + ty;
    int col = blockIdx.x * tile + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += tile) {
        As[ty * tile + tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
        Bs[ty * tile + tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < tile; ++k) {
            acc += As[ty * tile + k] * Bs[k * tile + tx];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}

// matmul_f64: one thread per output element, double precision, no tiling.
extern "C" __global__ void matmul_f64(const double* A, const double* B, double* C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) {
        return;
    }
    double acc = 0.0;
    for (int k = 0; k < K; ++k) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
}
