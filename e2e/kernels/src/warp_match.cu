// match.sync (sm_70 and later), kept apart so that a device without it fails
// only this module.

#define FULL 0xffffffffu

// warp_match: four words per thread: match.any of in[i]&7, match.all of
// in[i]&1 with its predicate, and match.all of the warp number (always all).
extern "C" __global__ void warp_match(const int* in, unsigned* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    int pred = 0;
    int pred2 = 0;
    unsigned any = __match_any_sync(FULL, v & 7);
    unsigned all = __match_all_sync(FULL, v & 1, &pred);
    unsigned same = __match_all_sync(FULL, i >> 5, &pred2);
    if (i < n) {
        out[4 * i + 0] = any;
        out[4 * i + 1] = all;
        out[4 * i + 2] = (unsigned)pred;
        out[4 * i + 3] = same ^ (unsigned)pred2;
    }
}
