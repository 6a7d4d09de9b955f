// Faulting kernels for the CUDA_ERROR_ILLEGAL_ADDRESS tests. Kept in their
// own module so that no other test loads them by accident.

// oob_write: thread 0 of block 0 stores to p[index]; with index far past the
// allocation the launch faults.
extern "C" __global__ void oob_write(int* p, long long index)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        p[index] = 0x0badf00d;
    }
}

// oob_read: thread 0 of block 0 loads p[index] into out[0].
extern "C" __global__ void oob_read(const int* p, long long index, int* out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = p[index];
    }
}
