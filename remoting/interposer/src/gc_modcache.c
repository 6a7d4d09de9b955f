/* Module upload once. A module image (cuBLASLt and PyTorch load fatbins
 * of many megabytes) is named by its SHA-256: the client asks the host to
 * load the image with that hash from its module cache, and sends the
 * bytes only when the host lacks them. The host checks an upload against
 * its hash before it loads or keeps it.
 *
 * The client never assumes what a host has: every load asks, so a session
 * moved to a host with an empty cache just uploads again. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "gc_core.h"
#include "gc_ext.h"
#include "../gen/gc_ops.h"

/* Images smaller than this are sent as they are: for them the extra
 * round trip of a miss costs more than the bytes. */
#define BY_HASH_MIN (16u << 10)

/* ---- SHA-256, as FIPS 180-4 specifies it ---------------------------------- */

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/* compress folds 64-byte blocks into the state. */
static void compress(uint32_t st[8], const uint8_t *p, size_t blocks)
{
	for (; blocks > 0; blocks--, p += 64) {
		uint32_t w[64];
		for (int i = 0; i < 16; i++)
			w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
		for (int i = 16; i < 64; i++) {
			uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
			uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
			w[i] = w[i - 16] + s0 + w[i - 7] + s1;
		}
		uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
		for (int i = 0; i < 64; i++) {
			uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
			uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
			h = g;
			g = f;
			f = e;
			e = d + t1;
			d = c;
			c = b;
			b = a;
			a = t1 + t2;
		}
		st[0] += a;
		st[1] += b;
		st[2] += c;
		st[3] += d;
		st[4] += e;
		st[5] += f;
		st[6] += g;
		st[7] += h;
	}
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

/* compress_ni is compress on the x86 SHA extensions, about ten times
 * faster: a 100 MiB fatbin hashes in tens of milliseconds. The state
 * lives in two registers, (A,B,E,F) and (C,D,G,H), the layout
 * sha256rnds2 works on; each call of it does two rounds and swaps the
 * roles of the two registers. */
__attribute__((target("sha,sse4.1"))) static void compress_ni(uint32_t st[8], const uint8_t *p, size_t blocks)
{
	const __m128i bswap = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
	__m128i abcd = _mm_loadu_si128((const __m128i *)&st[0]);
	__m128i efgh = _mm_loadu_si128((const __m128i *)&st[4]);
	abcd = _mm_shuffle_epi32(abcd, 0xB1);              /* b a d c */
	efgh = _mm_shuffle_epi32(efgh, 0x1B);              /* h g f e */
	__m128i abef = _mm_alignr_epi8(abcd, efgh, 8);     /* f e b a */
	__m128i cdgh = _mm_blend_epi16(efgh, abcd, 0xF0);  /* h g d c */
	for (; blocks > 0; blocks--, p += 64) {
		__m128i abef0 = abef, cdgh0 = cdgh, w[16];
		for (int i = 0; i < 4; i++)
			w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
		for (int i = 4; i < 16; i++) {
			__m128i x = _mm_sha256msg1_epu32(w[i - 4], w[i - 3]);
			x = _mm_add_epi32(x, _mm_alignr_epi8(w[i - 1], w[i - 2], 4));
			w[i] = _mm_sha256msg2_epu32(x, w[i - 1]);
		}
		for (int i = 0; i < 16; i++) {
			__m128i wk = _mm_add_epi32(w[i], _mm_loadu_si128((const __m128i *)&K[4 * i]));
			cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
			abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
		}
		abef = _mm_add_epi32(abef, abef0);
		cdgh = _mm_add_epi32(cdgh, cdgh0);
	}
	__m128i feba = _mm_shuffle_epi32(abef, 0x1B);      /* a b e f */
	__m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);      /* g h c d */
	_mm_storeu_si128((__m128i *)&st[0], _mm_blend_epi16(feba, dchg, 0xF0));
	_mm_storeu_si128((__m128i *)&st[4], _mm_alignr_epi8(dchg, feba, 8));
}

static int have_sha_ni(void)
{
	static int have = -1;
	if (__atomic_load_n(&have, __ATOMIC_RELAXED) < 0) {
		unsigned a, b, c, d;
		int yes = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29)) != 0 && /* SHA */
			  __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 19)) != 0;                 /* SSE4.1 */
		__atomic_store_n(&have, yes, __ATOMIC_RELAXED);
	}
	return have;
}
#else
static void compress_ni(uint32_t st[8], const uint8_t *p, size_t blocks) { compress(st, p, blocks); }
static int have_sha_ni(void) { return 0; }
#endif

void gc_sha256(const void *data, size_t n, uint8_t out[32])
{
	uint32_t st[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	const uint8_t *p = data;
	void (*fold)(uint32_t *, const uint8_t *, size_t) = have_sha_ni() && getenv("GPUCTL_SHA_PORTABLE") == NULL ? compress_ni : compress;
	fold(st, p, n / 64);
	/* The tail, a one bit, zeros, and the length in bits (big endian). */
	uint8_t last[128] = { 0 };
	size_t rest = n % 64;
	memcpy(last, p + n - rest, rest);
	last[rest] = 0x80;
	size_t tail = rest < 56 ? 64 : 128;
	uint64_t bits = (uint64_t)n * 8;
	for (int i = 0; i < 8; i++)
		last[tail - 1 - i] = (uint8_t)(bits >> (8 * i));
	fold(st, last, tail / 64);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(st[i] >> 24);
		out[4 * i + 1] = (uint8_t)(st[i] >> 16);
		out[4 * i + 2] = (uint8_t)(st[i] >> 8);
		out[4 * i + 3] = (uint8_t)st[i];
	}
}

/* ---- loading by hash ---------------------------------------------------------- */

/* old_server is set once a server answers that it has no module cache (a
 * gpud of an earlier version): loads then send the image at once. A
 * reconnect to another server clears it. */
static _Atomic uint64_t old_server_epoch;
static _Atomic int old_server;

CUresult gc_module_upload(uint64_t ctx, const void *image, size_t n, uint64_t *m)
{
	if (n < BY_HASH_MIN || gc_cache_off() ||
	    (atomic_load(&old_server) && atomic_load(&old_server_epoch) == gc_epoch()))
		return gc_rpc_ModuleLoad(ctx, image, n, m);
	uint8_t sum[32];
	gc_sha256(image, n, sum);
	int found = 0;
	uint64_t mm = 0;
	CUresult r = gc_rpc_ModuleLoadCached(ctx, sum, sizeof sum, n, &mm, &found);
	if (r == CUDA_ERROR_NOT_SUPPORTED) {
		atomic_store(&old_server_epoch, gc_epoch());
		atomic_store(&old_server, 1);
		return gc_rpc_ModuleLoad(ctx, image, n, m);
	}
	if (r != CUDA_SUCCESS)
		return r;
	if (found) {
		*m = mm;
		return CUDA_SUCCESS;
	}
	return gc_rpc_ModuleUpload(ctx, sum, sizeof sum, image, n, m);
}
