/* Little-endian field access for the wire format (docs/protocol.md).
 * The interposer builds only for little-endian hosts (x86-64, arm64), so
 * these are plain unaligned copies. */
#ifndef GPUCTL_GC_WIREFMT_H
#define GPUCTL_GC_WIREFMT_H

#include <stdint.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gpuctl's interposer assumes a little-endian host"
#endif

static inline uint8_t *gc_put_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); return p + 2; }
static inline uint8_t *gc_put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); return p + 4; }
static inline uint8_t *gc_put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); return p + 8; }
static inline uint8_t *gc_put_f32(uint8_t *p, float v) { memcpy(p, &v, 4); return p + 4; }

/* gc_put_bytes writes a u32 length and, when src is not NULL, the bytes. */
static inline uint8_t *gc_put_bytes(uint8_t *p, const void *src, size_t n)
{
	p = gc_put_u32(p, (uint32_t)n);
	if (src != NULL && n > 0)
		memcpy(p, src, n);
	return p + n;
}

/* Fixed frame headers as laid out on the wire (little endian, no
 * padding); see docs/protocol.md. A Go test checks these layouts against
 * package wire. */
struct gc_req_hdr {
	uint32_t len;   /* argument bytes */
	uint16_t op;
	uint16_t flags;
	uint64_t seq;
	uint64_t bulk;  /* bulk bytes after the arguments */
};

struct gc_rep_hdr {
	uint32_t len;   /* payload bytes */
	uint16_t kind;
	uint16_t flags;
	uint32_t result;
	uint32_t reserved;
	uint64_t seq;
	uint64_t executed;
	uint64_t bulk;
};

struct gc_hello_hdr {
	char magic[4];
	uint16_t version;
	uint16_t flags;
	uint16_t token_len;
	uint16_t session_id_len;
	uint16_t secret_len;
	uint16_t attrs_len; /* priority (int32) and labels text, after the secret */
	uint64_t last_seq;
};

struct gc_welcome_hdr {
	char magic[4];
	uint16_t version;
	uint16_t status;
	uint16_t session_id_len;
	uint16_t secret_len;
	uint16_t message_len;
	uint16_t features;
	uint32_t max_frame;
	uint32_t keepalive_ms;
	uint64_t last_executed;
};

_Static_assert(sizeof(struct gc_req_hdr) == 24, "request header");
_Static_assert(sizeof(struct gc_rep_hdr) == 40, "reply header");
_Static_assert(sizeof(struct gc_hello_hdr) == 24, "hello");
_Static_assert(sizeof(struct gc_welcome_hdr) == 32, "welcome");

static inline uint16_t gc_ld_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t gc_ld_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t gc_ld_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* gc_rd reads a reply payload; a short payload sets bad. */
struct gc_rd {
	const uint8_t *b;
	size_t n;
	size_t off;
	int bad;
};

static inline const uint8_t *gc_take(struct gc_rd *d, size_t n)
{
	if (d->bad || d->n - d->off < n) {
		d->bad = 1;
		return NULL;
	}
	const uint8_t *p = d->b + d->off;
	d->off += n;
	return p;
}

static inline uint32_t gc_get_u32(struct gc_rd *d)
{
	const uint8_t *p = gc_take(d, 4);
	return p ? gc_ld_u32(p) : 0;
}

static inline uint64_t gc_get_u64(struct gc_rd *d)
{
	const uint8_t *p = gc_take(d, 8);
	return p ? gc_ld_u64(p) : 0;
}

static inline float gc_get_f32(struct gc_rd *d)
{
	float v = 0;
	const uint8_t *p = gc_take(d, 4);
	if (p)
		memcpy(&v, p, 4);
	return v;
}

static inline void gc_get_raw(struct gc_rd *d, void *dst, size_t n)
{
	const uint8_t *p = gc_take(d, n);
	if (p)
		memcpy(dst, p, n);
}

/* gc_get_str copies a length-prefixed string, NUL-terminated and
 * truncated to cap. */
static inline void gc_get_str(struct gc_rd *d, char *dst, size_t cap)
{
	uint32_t n = gc_get_u32(d);
	const uint8_t *p = gc_take(d, n);
	if (p == NULL || cap == 0)
		return;
	size_t m = n < cap - 1 ? n : cap - 1;
	memcpy(dst, p, m);
	dst[m] = 0;
}

/* gc_get_bytes copies a length-prefixed byte string of at most cap bytes
 * and stores its length; a longer one is an error. */
static inline void gc_get_bytes(struct gc_rd *d, void *dst, uint32_t cap, uint32_t *len)
{
	uint32_t n = gc_get_u32(d);
	if (n > cap) {
		d->bad = 1;
		return;
	}
	const uint8_t *p = gc_take(d, n);
	if (p == NULL)
		return;
	memcpy(dst, p, n);
	*len = n;
}

/* gc_get_params reads a kernel's parameter layout: count, then
 * (offset, size) pairs. More than cap pairs is an error. */
static inline void gc_get_params(struct gc_rd *d, uint32_t *count, uint32_t *pairs, uint32_t cap)
{
	uint32_t n = gc_get_u32(d);
	if (n > cap) {
		d->bad = 1;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		pairs[2 * i] = gc_get_u32(d);
		pairs[2 * i + 1] = gc_get_u32(d);
	}
	*count = n;
}

#endif
