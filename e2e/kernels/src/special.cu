// Special registers: thread and block indices and dimensions in three
// dimensions, %laneid, and the clocks.

#define KSPEC 14

// special_regs: KSPEC (14) words per thread, at the thread's linear index in
// the grid (block-linear index * threads per block + thread-linear index):
//   tid.x, tid.y, tid.z, ntid.x, ntid.y, ntid.z, ctaid.x, ctaid.y, ctaid.z,
//   nctaid.x, nctaid.y, nctaid.z, laneid, 1 if clock64 did not go backwards.
extern "C" __global__ void special_regs(unsigned* out)
{
    long long c0 = clock64();
    unsigned tlin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned blin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned g = blin * (blockDim.x * blockDim.y * blockDim.z) + tlin;
    unsigned* o = out + (size_t)g * KSPEC;
    o[0] = threadIdx.x;
    o[1] = threadIdx.y;
    o[2] = threadIdx.z;
    o[3] = blockDim.x;
    o[4] = blockDim.y;
    o[5] = blockDim.z;
    o[6] = blockIdx.x;
    o[7] = blockIdx.y;
    o[8] = blockIdx.z;
    o[9] = gridDim.x;
    o[10] = gridDim.y;
    o[11] = gridDim.z;
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    o[12] = lane;
    long long c1 = clock64();
    o[13] = c1 >= c0 ? 1u : 0u;
}
