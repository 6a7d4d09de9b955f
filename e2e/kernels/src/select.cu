// Control flow: selects and predication, and divergent loops with
// data-dependent trip counts, break, continue and a switch.

#define KSEL 8

// select_pred: KSEL (8) results per element, in the order written below.
extern "C" __global__ void select_pred(const int* as, const int* bs, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int a = as[i];
    int b = bs[i];
    int* o = out + (size_t)i * KSEL;
    o[0] = a > b ? a - b : b - a;
    o[1] = min(max(a, -100), 100);
    o[2] = abs(a);
    o[3] = (a > 0) - (a < 0);
    o[4] = (a & 1) ? a * 3 : a / 2;
    o[5] = (((a < b) && (b < 1000)) || (a == 7)) ? 1 : 2;
    o[6] = ((unsigned)a < (unsigned)b) ? max(a, b) : min(a, b);
    int s = 0;
    if (a > 0) {
        s += b;
    }
    if (b & 2) {
        s ^= a;
    }
    if (a < b) {
        s -= 1;
    }
    o[7] = s;
}

// divergent_loop: per element, iterate until x < 16 or more than 200 steps;
// odd x: x = x/3 + (x & 7) then a switch on x & 7; even x: x >>= 1, and when
// steps & 4 is set, steps += 2 and the rest of the iteration is skipped.
// Writes (x, steps, tag) per element.
extern "C" __global__ void divergent_loop(const unsigned* in, unsigned* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    unsigned x = in[i];
    unsigned steps = 0;
    unsigned tag = 0;
    while (true) {
        if (x < 16u) {
            break;
        }
        if (x & 1u) {
            x = x / 3u + (x & 7u);
            switch (x & 7u) {
            case 0: tag += 1u; break;
            case 1: tag ^= 0x10u; break;
            case 2: tag = tag * 3u; break;
            case 3: tag += x; break;
            case 4: tag -= 7u; break;
            case 5: tag = (tag << 1) | 1u; break;
            case 6: tag = ~tag; break;
            default: tag += 100u; break;
            }
        } else {
            x >>= 1;
            if (steps & 4u) {
                steps += 2u;
                continue;
            }
        }
        steps++;
        if (steps > 200u) {
            break;
        }
    }
    out[3 * i + 0] = x;
    out[3 * i + 1] = steps;
    out[3 * i + 2] = tag;
}
