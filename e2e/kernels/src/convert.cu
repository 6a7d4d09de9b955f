// Conversions between integer and floating-point types with every rounding
// mode. Float-to-integer conversions follow PTX cvt semantics: NaN becomes 0
// and out-of-range values saturate.

// convert_f2i: per element i:
//   oi[4i..]  = __float2int_rn, _rz, _ru, _rd
//   ou[2i..]  = __float2uint_rn, _rz
//   oll[2i..] = __float2ll_rn, _rz
//   oull[i]   = __float2ull_ru
extern "C" __global__ void convert_f2i(const float* in, int* oi, unsigned* ou, long long* oll, unsigned long long* oull, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float v = in[i];
    oi[4 * i + 0] = __float2int_rn(v);
    oi[4 * i + 1] = __float2int_rz(v);
    oi[4 * i + 2] = __float2int_ru(v);
    oi[4 * i + 3] = __float2int_rd(v);
    ou[2 * i + 0] = __float2uint_rn(v);
    ou[2 * i + 1] = __float2uint_rz(v);
    oll[2 * i + 0] = __float2ll_rn(v);
    oll[2 * i + 1] = __float2ll_rz(v);
    oull[i] = __float2ull_ru(v);
}

// convert_i2f: per element i, with v = in[i] and w = in64[i]:
//   of[8i..] = __int2float_rn(v), _rz(v), _ru(v), _rd(v), __uint2float_rn((unsigned)v),
//              __ll2float_rn(w), __ull2float_rz((unsigned long long)w), __double2float_ru(w * 2^-20)
//   od[4i..] = __int2double_rn(v), __ll2double_rn(w), __ull2double_rz(w), __uint2double_rn((unsigned)v)
//   oll[2i..] = __double2ll_rn(w * 0.001), __double2int_rd(v * 0.75)
extern "C" __global__ void convert_i2f(const int* in, const long long* in64, float* of, double* od, long long* oll, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int v = in[i];
    long long w = in64[i];
    of[8 * i + 0] = __int2float_rn(v);
    of[8 * i + 1] = __int2float_rz(v);
    of[8 * i + 2] = __int2float_ru(v);
    of[8 * i + 3] = __int2float_rd(v);
    of[8 * i + 4] = __uint2float_rn((unsigned)v);
    of[8 * i + 5] = __ll2float_rn(w);
    of[8 * i + 6] = __ull2float_rz((unsigned long long)w);
    of[8 * i + 7] = __double2float_ru((double)w * 0x1p-20);
    od[4 * i + 0] = __int2double_rn(v);
    od[4 * i + 1] = __ll2double_rn(w);
    od[4 * i + 2] = __ull2double_rz((unsigned long long)w);
    od[4 * i + 3] = __uint2double_rn((unsigned)v);
    oll[2 * i + 0] = __double2ll_rn((double)w * 0.001);
    oll[2 * i + 1] = (long long)__double2int_rd((double)v * 0.75);
}
