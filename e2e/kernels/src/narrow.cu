// 8- and 16-bit data: loads and stores of signed and unsigned chars and
// shorts (ld/st .s8/.u8/.s16/.u16), the conversions C's integer promotions
// and narrowing casts produce, a byte array in shared memory, and 4-byte
// vectors (ld/st .v4.u8).

// narrow_types: per element i, with a = i8[i], b = u8[i], c = i16[i], d = u16[i]:
//   out[4i..] = a*b + c, (signed char)(a + b), (short)(c*3 + d),
//               (unsigned char)(d >> 3) | ((signed char)b << 8)
//   o8[i]     = (signed char)(a ^ b)
//   o16[i]    = (unsigned short)(c + d)
//   sh[i]     = the byte written by thread (tid*7)&255 of the same block
//               into shared memory: u8[i'] ^ tid', for i' its element.
// blockDim.x must be 256.
extern "C" __global__ void narrow_types(const signed char* i8, const unsigned char* u8, const short* i16,
                                        const unsigned short* u16, int* out, signed char* o8,
                                        unsigned short* o16, unsigned char* sh, int n)
{
    __shared__ unsigned char sbuf[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned char mine = i < n ? (unsigned char)(u8[i] ^ threadIdx.x) : 0;
    sbuf[threadIdx.x] = mine;
    __syncthreads();
    if (i >= n) {
        return;
    }
    int a = i8[i];
    int b = u8[i];
    int c = i16[i];
    int d = u16[i];
    out[4 * i + 0] = a * b + c;
    out[4 * i + 1] = (signed char)(a + b);
    out[4 * i + 2] = (short)(c * 3 + d);
    out[4 * i + 3] = (unsigned char)(d >> 3) | ((int)(signed char)b << 8);
    o8[i] = (signed char)(a ^ b);
    o16[i] = (unsigned short)(c + d);
    sh[i] = sbuf[(threadIdx.x * 7) & 255];
}

// bytes_v4: out[i] = (in.w, in.z + 1, in.y ^ in.x, in.x) on uchar4 vectors.
extern "C" __global__ void bytes_v4(const uchar4* in, uchar4* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        uchar4 v = in[i];
        out[i] = make_uchar4(v.w, (unsigned char)(v.z + 1), (unsigned char)(v.y ^ v.x), v.x);
    }
}
