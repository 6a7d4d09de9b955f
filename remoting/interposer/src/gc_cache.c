/* Client-side caches of what does not change while a session lives:
 * device count, names, memory sizes and attributes, the device of each
 * context, the primary context's state; and the per-op request counters
 * that GPUCTL_STATS prints at exit.
 *
 * A training step asks these questions hundreds of times (cuCtxGetDevice,
 * cuDeviceGetAttribute, cuDevicePrimaryCtxGetState); each would otherwise
 * be a round trip. Values fetched from the server carry the connection
 * epoch they were fetched in and are fetched again after a reconnect: a
 * session is only ever restored on the same GPU model, but the refresh
 * costs one round trip per question and takes no chances. State that only
 * this client changes (which contexts exist, primary-context references)
 * is tracked as the client changes it; this file is the one place that
 * does, so it is also where a context going away (destroyed, or a primary
 * context's last release or reset) runs the context-local-storage
 * destructors the CUDA runtime registered for it (gc_export.c).
 *
 * GPUCTL_NO_CACHE=1 sends every question to the server, to measure what
 * the caches save. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "gc_core.h"
#include "gc_ext.h"
#include "gc_runtime.h"
#include "../gen/gc_ops.h"
#include "../gen/gc_undef.h"

/* ---- request statistics ------------------------------------------------ */

#define STAT_OPS 1024

static _Atomic uint64_t st_sync[STAT_OPS], st_async[STAT_OPS];

void gc_stats_note(uint16_t op, int async)
{
	if (op >= STAT_OPS)
		return;
	if (async)
		atomic_fetch_add_explicit(&st_async[op], 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&st_sync[op], 1, memory_order_relaxed);
}

/* stats_dump prints, at exit, how many requests of each op the process
 * made: synchronous ones are round trips. GPUCTL_STATS=1 (or "stderr")
 * writes lines to stderr; any other value is a file that gets one JSON
 * object: {"round_trips": {"Op": n, ...}, "async": {...}, "total_round_trips": n}. */
__attribute__((destructor)) static void stats_dump(void)
{
	const char *where = getenv("GPUCTL_STATS");
	if (where == NULL || *where == 0)
		return;
	uint64_t total = 0, atotal = 0;
	for (int i = 0; i < STAT_OPS; i++) {
		total += atomic_load(&st_sync[i]);
		atotal += atomic_load(&st_async[i]);
	}
	if (strcmp(where, "1") == 0 || strcmp(where, "stderr") == 0) {
		gc_log("stats: %llu round trips, %llu asynchronous requests", (unsigned long long)total,
		       (unsigned long long)atotal);
		for (int i = 0; i < STAT_OPS; i++) {
			uint64_t s = atomic_load(&st_sync[i]), a = atomic_load(&st_async[i]);
			if (s + a > 0 && gc_op_name(i) != NULL)
				gc_log("stats: %-28s round trips %llu, async %llu", gc_op_name(i), (unsigned long long)s,
				       (unsigned long long)a);
		}
		return;
	}
	FILE *f = fopen(where, "we");
	if (f == NULL) {
		gc_log("GPUCTL_STATS: cannot write %s", where);
		return;
	}
	for (int pass = 0; pass < 2; pass++) {
		fprintf(f, pass == 0 ? "{\"round_trips\": {" : "}, \"async\": {");
		int first = 1;
		for (int i = 0; i < STAT_OPS; i++) {
			uint64_t v = atomic_load(pass == 0 ? &st_sync[i] : &st_async[i]);
			if (v > 0 && gc_op_name(i) != NULL) {
				fprintf(f, "%s\"%s\": %llu", first ? "" : ", ", gc_op_name(i), (unsigned long long)v);
				first = 0;
			}
		}
	}
	fprintf(f, "}, \"total_round_trips\": %llu, \"total_async\": %llu}\n", (unsigned long long)total,
		(unsigned long long)atotal);
	fclose(f);
}

int gc_cache_off(void)
{
	static int off = -1;
	if (__atomic_load_n(&off, __ATOMIC_RELAXED) < 0) {
		const char *v = getenv("GPUCTL_NO_CACHE");
		__atomic_store_n(&off, v != NULL && *v != 0 && strcmp(v, "0") != 0, __ATOMIC_RELAXED);
	}
	return off;
}

/* ---- devices ----------------------------------------------------------- */

/* MAX_DEVS bounds the devices cached; a session shows one. NATTR covers
 * every attribute of CUDA 13 (CU_DEVICE_ATTRIBUTE_MAX) with room to grow. */
#define MAX_DEVS 16
#define NATTR 160

struct attrs {
	uint64_t epoch;
	int32_t res[NATTR];
	int32_t val[NATTR];
};

/* Published with release order once filled; a reader that sees a pointer
 * sees its contents. Replaced tables are kept (a reconnect is rare), so a
 * reader never touches freed memory. */
static _Atomic(struct attrs *) attrs_of[MAX_DEVS];

static struct {
	pthread_mutex_t mu;
	uint64_t count_epoch, ver_epoch;
	int have_count, have_ver;
	int32_t count, ver;
	struct devinfo {
		uint64_t epoch;
		int have_name, have_uuid, have_mem, have_bus;
		char name[256];
		uint8_t uuid[16];
		uint64_t mem;
		char bus[64];
	} dev[MAX_DEVS];
} dc = { .mu = PTHREAD_MUTEX_INITIALIZER };

CUresult gc_dev_count(int32_t *n)
{
	if (gc_cache_off())
		return gc_rpc_DeviceCount(n);
	uint64_t ep = gc_epoch();
	pthread_mutex_lock(&dc.mu);
	if (dc.have_count && dc.count_epoch == ep) {
		*n = dc.count;
		pthread_mutex_unlock(&dc.mu);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&dc.mu);
	CUresult r = gc_rpc_DeviceCount(n);
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&dc.mu);
		dc.have_count = 1;
		dc.count = *n;
		dc.count_epoch = ep;
		pthread_mutex_unlock(&dc.mu);
	}
	return r;
}

CUresult gc_driver_version(int32_t *v)
{
	if (gc_cache_off())
		return gc_rpc_DriverVersion(v);
	uint64_t ep = gc_epoch();
	pthread_mutex_lock(&dc.mu);
	if (dc.have_ver && dc.ver_epoch == ep) {
		*v = dc.ver;
		pthread_mutex_unlock(&dc.mu);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&dc.mu);
	CUresult r = gc_rpc_DriverVersion(v);
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&dc.mu);
		dc.have_ver = 1;
		dc.ver = *v;
		dc.ver_epoch = ep;
		pthread_mutex_unlock(&dc.mu);
	}
	return r;
}

/* devinfo returns the cache slot of dev for the current epoch, cleared if
 * it was filled in an older one; NULL when dev is out of the cache's
 * range or caching is off. mu held. */
static struct devinfo *devinfo(CUdevice dev)
{
	if (gc_cache_off() || dev < 0 || dev >= MAX_DEVS)
		return NULL;
	struct devinfo *di = &dc.dev[dev];
	uint64_t ep = gc_epoch();
	if (di->epoch != ep) {
		memset(di, 0, sizeof *di);
		di->epoch = ep;
	}
	return di;
}

CUresult gc_dev_name(CUdevice dev, char *name, size_t len)
{
	pthread_mutex_lock(&dc.mu);
	struct devinfo *di = devinfo(dev);
	if (di != NULL && di->have_name) {
		snprintf(name, len, "%s", di->name);
		pthread_mutex_unlock(&dc.mu);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&dc.mu);
	char buf[256];
	CUresult r = gc_rpc_DeviceName(dev, buf, sizeof buf);
	if (r != CUDA_SUCCESS)
		return r;
	snprintf(name, len, "%s", buf);
	pthread_mutex_lock(&dc.mu);
	if ((di = devinfo(dev)) != NULL) {
		memcpy(di->name, buf, sizeof buf);
		di->have_name = 1;
	}
	pthread_mutex_unlock(&dc.mu);
	return CUDA_SUCCESS;
}

CUresult gc_dev_uuid(CUdevice dev, uint8_t *uuid)
{
	pthread_mutex_lock(&dc.mu);
	struct devinfo *di = devinfo(dev);
	if (di != NULL && di->have_uuid) {
		memcpy(uuid, di->uuid, 16);
		pthread_mutex_unlock(&dc.mu);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&dc.mu);
	CUresult r = gc_rpc_DeviceUUID(dev, uuid);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&dc.mu);
	if ((di = devinfo(dev)) != NULL) {
		memcpy(di->uuid, uuid, 16);
		di->have_uuid = 1;
	}
	pthread_mutex_unlock(&dc.mu);
	return CUDA_SUCCESS;
}

CUresult gc_dev_busid(CUdevice dev, char *bus, size_t len)
{
	pthread_mutex_lock(&dc.mu);
	struct devinfo *di = devinfo(dev);
	if (di != NULL && di->have_bus) {
		snprintf(bus, len, "%s", di->bus);
		pthread_mutex_unlock(&dc.mu);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&dc.mu);
	char buf[64];
	CUresult r = gc_rpc_DevicePCIBusID(dev, buf, sizeof buf);
	if (r != CUDA_SUCCESS)
		return r;
	snprintf(bus, len, "%s", buf);
	pthread_mutex_lock(&dc.mu);
	if ((di = devinfo(dev)) != NULL) {
		memcpy(di->bus, buf, sizeof buf);
		di->have_bus = 1;
	}
	pthread_mutex_unlock(&dc.mu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	int32_t n;
	if (r == CUDA_SUCCESS && (r = gc_dev_count(&n)) == CUDA_SUCCESS)
		*count = n;
	return r;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&dc.mu);
	struct devinfo *di = devinfo(dev);
	if (di != NULL && di->have_mem) {
		*bytes = di->mem;
		pthread_mutex_unlock(&dc.mu);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&dc.mu);
	uint64_t n;
	if ((r = gc_rpc_DeviceTotalMem(dev, &n)) != CUDA_SUCCESS)
		return r;
	*bytes = n;
	pthread_mutex_lock(&dc.mu);
	if ((di = devinfo(dev)) != NULL) {
		di->mem = n;
		di->have_mem = 1;
	}
	pthread_mutex_unlock(&dc.mu);
	return CUDA_SUCCESS;
}

/* attrs_fill fetches every attribute of dev with one round trip. */
static CUresult attrs_fill(CUdevice dev, struct attrs **out)
{
	static pthread_mutex_t fill_mu = PTHREAD_MUTEX_INITIALIZER;
	uint64_t ep = gc_epoch();
	pthread_mutex_lock(&fill_mu);
	struct attrs *a = atomic_load_explicit(&attrs_of[dev], memory_order_acquire);
	if (a != NULL && a->epoch == ep) {
		pthread_mutex_unlock(&fill_mu);
		*out = a;
		return CUDA_SUCCESS;
	}
	uint8_t *buf = malloc(8 * NATTR);
	a = calloc(1, sizeof *a);
	CUresult r = buf && a ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	uint32_t n = 0;
	if (r == CUDA_SUCCESS)
		r = gc_rpc_DeviceAttributes(dev, NATTR, buf, 8 * NATTR, &n);
	if (r == CUDA_SUCCESS && n != 8 * NATTR) {
		gc_log("the server answered %u bytes of device attributes where %u were asked for", n, 8 * NATTR);
		r = CUDA_ERROR_UNKNOWN;
	}
	if (r != CUDA_SUCCESS) {
		pthread_mutex_unlock(&fill_mu);
		free(buf);
		free(a);
		return r;
	}
	a->epoch = ep;
	for (int i = 0; i < NATTR; i++) {
		a->res[i] = (int32_t)gc_ld_u32(buf + 8 * i);
		a->val[i] = (int32_t)gc_ld_u32(buf + 8 * i + 4);
	}
	free(buf);
	atomic_store_explicit(&attrs_of[dev], a, memory_order_release);
	pthread_mutex_unlock(&fill_mu);
	*out = a;
	return CUDA_SUCCESS;
}

/* attrs_table: dev's table of this connection epoch, filled when it is
 * missing or older; no lock once it is there. */
static CUresult attrs_table(CUdevice dev, struct attrs **out)
{
	struct attrs *a = atomic_load_explicit(&attrs_of[dev], memory_order_acquire);
	if (a == NULL || a->epoch != gc_epoch())
		return attrs_fill(dev, out);
	*out = a;
	return CUDA_SUCCESS;
}

CUresult gc_dev_attr(int32_t attr, CUdevice dev, int *v)
{
	if (gc_cache_off() || dev < 0 || dev >= MAX_DEVS || attr < 0 || attr >= NATTR) {
		int32_t x;
		CUresult r = gc_rpc_DeviceAttribute(attr, dev, &x);
		if (r == CUDA_SUCCESS)
			*v = x;
		return r;
	}
	struct attrs *a;
	CUresult r = attrs_table(dev, &a);
	if (r != CUDA_SUCCESS)
		return r;
	if (a->res[attr] != CUDA_SUCCESS)
		return (CUresult)a->res[attr];
	*v = a->val[attr];
	return CUDA_SUCCESS;
}

CUresult gc_dev_attrs(CUdevice dev, int n, const CUdevice_attribute *attrs, int *v)
{
	if (dev < 0 || dev >= MAX_DEVS) {
		for (int i = 0; i < n; i++) {
			int32_t x;
			CUresult r = gc_rpc_DeviceAttribute((int32_t)attrs[i], dev, &x);
			if (r != CUDA_SUCCESS)
				return r;
			v[i] = x;
		}
		return CUDA_SUCCESS;
	}
	struct attrs *a;
	CUresult r = attrs_table(dev, &a);
	if (r != CUDA_SUCCESS)
		return r;
	for (int i = 0; i < n; i++) {
		int at = (int)attrs[i];
		if (at < 0 || at >= NATTR)
			return CUDA_ERROR_INVALID_VALUE;
		if (a->res[at] != CUDA_SUCCESS)
			return (CUresult)a->res[at];
		v[i] = a->val[at];
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_dev_attr((int32_t)attrib, dev, pi);
	/* GPUCTL_DEBUG=2 logs each attribute's first answer, to compare with
	 * the driver's. */
	const char *d = getenv("GPUCTL_DEBUG");
	if (d != NULL && d[0] == '2' && (unsigned)attrib < 256) {
		static _Atomic uint64_t seen[4];
		uint64_t bit = 1ull << ((unsigned)attrib % 64);
		if (!(atomic_fetch_or(&seen[(unsigned)attrib / 64], bit) & bit))
			gc_log("device attribute %d of %d: %d (result %d)", (int)attrib, (int)dev, r == CUDA_SUCCESS ? *pi : 0, (int)r);
	}
	return r;
}

/* ---- contexts ------------------------------------------------------------ */

/* The contexts this client created or retained, with their device and
 * flags: the one table of them, which answers cuCtxGetDevice and
 * cuCtxGetFlags and whose removals run the runtime's context-local-storage
 * destructors. Contexts live in the session, which survives reconnects,
 * so the table needs no refresh. */
static struct {
	pthread_rwlock_t mu;
	struct ctxinfo {
		uint64_t ctx;
		int dev;
		unsigned int flags;
		int primary;
		uint64_t id; /* its unique number: 1, 2, ... in the order contexts were made */
	} *t;
	size_t n, cap;
	uint64_t ids;
} ct = { .mu = PTHREAD_RWLOCK_INITIALIZER };

void gc_ctx_created(uint64_t ctx, int dev, unsigned int flags, int primary)
{
	pthread_rwlock_wrlock(&ct.mu);
	for (size_t i = 0; i < ct.n; i++) {
		if (ct.t[i].ctx == ctx) {
			ct.t[i] = (struct ctxinfo){ ctx, dev, flags, primary, ct.t[i].id };
			pthread_rwlock_unlock(&ct.mu);
			return;
		}
	}
	if (ct.n == ct.cap) {
		size_t nc = ct.cap ? 2 * ct.cap : 16;
		struct ctxinfo *nt = realloc(ct.t, nc * sizeof *nt);
		if (nt == NULL) {
			pthread_rwlock_unlock(&ct.mu);
			return; /* questions about it then go to the server */
		}
		ct.t = nt;
		ct.cap = nc;
	}
	ct.t[ct.n++] = (struct ctxinfo){ ctx, dev, flags, primary, ++ct.ids };
	pthread_rwlock_unlock(&ct.mu);
}

void gc_ctx_gone(uint64_t ctx)
{
	if (ctx == 0)
		return;
	/* The destructors run first and outside the table's lock: they may
	 * call back into the driver and ask about the context. */
	gc_cls_context_gone((CUcontext)(uintptr_t)ctx);
	pthread_rwlock_wrlock(&ct.mu);
	for (size_t i = 0; i < ct.n; i++) {
		if (ct.t[i].ctx == ctx) {
			ct.t[i] = ct.t[--ct.n];
			break;
		}
	}
	pthread_rwlock_unlock(&ct.mu);
}

static int ctx_lookup(uint64_t ctx, struct ctxinfo *out)
{
	int hit = 0;
	pthread_rwlock_rdlock(&ct.mu);
	for (size_t i = 0; i < ct.n && !hit; i++) {
		if (ct.t[i].ctx == ctx) {
			*out = ct.t[i];
			hit = 1;
		}
	}
	pthread_rwlock_unlock(&ct.mu);
	return hit;
}

uint64_t gc_ctx_id(uint64_t ctx)
{
	struct ctxinfo ci;
	return ctx_lookup(ctx, &ci) ? ci.id : 0;
}

CUresult gc_ctx_dev(uint64_t ctx, int *dev)
{
	struct ctxinfo ci;
	if (!gc_cache_off() && ctx_lookup(ctx, &ci)) {
		*dev = ci.dev;
		return CUDA_SUCCESS;
	}
	int32_t d;
	CUresult r = gc_rpc_CtxDevice(ctx, &d);
	if (r == CUDA_SUCCESS)
		*dev = d;
	return r;
}

/* cuCtxGetDevice_v2 is CUDA 13's form, which names its context (NULL: the
 * current one); cudart asks for it from 13.0 on. */
CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t c;
	CUresult r = gc_ctx_or_current(ctx, &c);
	int dev;
	if (r == CUDA_SUCCESS && (r = gc_ctx_dev(c, &dev)) == CUDA_SUCCESS)
		*device = dev;
	return r;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) { return cuCtxGetDevice_v2(device, NULL); }

/* ---- primary contexts ---------------------------------------------------- */

/* Each device's primary context as this client sees it: its state
 * (fetched once per epoch, then following this client's calls: a session
 * is the only user of its primary context), this client's references, and
 * its handle while retained. The last release and a reset destroy it, and
 * with it its context-local storage. */
static struct {
	pthread_mutex_t mu;
	struct prim {
		uint64_t epoch;
		int have;      /* flags and active known for epoch */
		unsigned int flags;
		int active;
		int refs;      /* retains by this client not yet released */
		uint64_t ctx;  /* the handle, while retained */
	} d[MAX_DEVS];
} pc = { .mu = PTHREAD_MUTEX_INITIALIZER };

static struct prim *prim(CUdevice dev) { return dev >= 0 && dev < MAX_DEVS ? &pc.d[dev] : NULL; }

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	if (flags == NULL || active == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t ep = gc_epoch();
	struct prim *p = prim(dev);
	pthread_mutex_lock(&pc.mu);
	if (p != NULL && p->have && p->epoch == ep && !gc_cache_off()) {
		*flags = p->flags;
		*active = p->active;
		pthread_mutex_unlock(&pc.mu);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&pc.mu);
	uint32_t f;
	int a;
	if ((r = gc_rpc_PrimaryCtxState(dev, &f, &a)) != CUDA_SUCCESS)
		return r;
	*flags = f;
	*active = a;
	if (p != NULL) {
		pthread_mutex_lock(&pc.mu);
		p->have = 1;
		p->epoch = ep;
		p->flags = f;
		p->active = a;
		pthread_mutex_unlock(&pc.mu);
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	uint64_t c;
	if (r == CUDA_SUCCESS)
		r = gc_rpc_PrimaryCtxRetain(dev, &c);
	if (r != CUDA_SUCCESS)
		return r;
	*pctx = (CUcontext)(uintptr_t)c;
	struct prim *p = prim(dev);
	unsigned int flags = 0;
	if (p != NULL) {
		pthread_mutex_lock(&pc.mu);
		p->refs++;
		p->active = 1;
		p->ctx = c;
		flags = p->flags;
		pthread_mutex_unlock(&pc.mu);
	}
	gc_ctx_created(c, dev, flags, 1);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_PrimaryCtxRelease(dev);
	struct prim *p = prim(dev);
	if (r != CUDA_SUCCESS || p == NULL)
		return r;
	pthread_mutex_lock(&pc.mu);
	uint64_t gone = 0;
	if (p->refs > 0 && --p->refs == 0) {
		/* The last release destroys the primary context. */
		p->active = 0;
		gone = p->ctx;
		p->ctx = 0;
	}
	pthread_mutex_unlock(&pc.mu);
	gc_ctx_gone(gone);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_PrimaryCtxReset(dev);
	struct prim *p = prim(dev);
	if (r != CUDA_SUCCESS || p == NULL)
		return r;
	pthread_mutex_lock(&pc.mu);
	uint64_t gone = p->ctx;
	p->refs = 0;
	p->active = 0;
	p->flags = 0;
	p->ctx = 0;
	pthread_mutex_unlock(&pc.mu);
	gc_ctx_gone(gone);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_PrimaryCtxSetFlags(dev, flags);
	struct prim *p = prim(dev);
	if (r != CUDA_SUCCESS || p == NULL)
		return r;
	pthread_mutex_lock(&pc.mu);
	p->flags = flags;
	uint64_t c = p->ctx;
	pthread_mutex_unlock(&pc.mu);
	if (c != 0)
		gc_ctx_created(c, dev, flags, 1);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

uint64_t gc_primary_ctx_held(CUdevice dev)
{
	struct prim *p = prim(dev);
	if (p == NULL)
		return 0;
	pthread_mutex_lock(&pc.mu);
	uint64_t c = p->refs > 0 ? p->ctx : 0;
	pthread_mutex_unlock(&pc.mu);
	return c;
}

CUresult gc_primary_ctx_peek(CUdevice dev, CUcontext *pctx)
{
	struct prim *p = prim(dev);
	if (p == NULL)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&pc.mu);
	uint64_t c = p->ctx;
	pthread_mutex_unlock(&pc.mu);
	if (c != 0) {
		*pctx = (CUcontext)(uintptr_t)c;
		return CUDA_SUCCESS;
	}
	/* The server names a primary context only once it is retained, so
	 * a process that has not retained it yet retains it here. */
	return cuDevicePrimaryCtxRetain(pctx, dev);
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
	if (flags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	struct ctxinfo ci;
	int known = ctx_lookup(ctx, &ci);
	if (known && !ci.primary) {
		*flags = ci.flags;
		return CUDA_SUCCESS;
	}
	/* A primary context's flags are the device's primary-context flags,
	 * which cuDevicePrimaryCtxSetFlags changes. A context missing from
	 * the table (it could not grow) is looked up on the server. */
	int dev = ci.dev;
	if (!known && (r = gc_ctx_dev(ctx, &dev)) != CUDA_SUCCESS)
		return r;
	unsigned int f;
	int active;
	if ((r = cuDevicePrimaryCtxGetState(dev, &f, &active)) != CUDA_SUCCESS)
		return r;
	*flags = f;
	return CUDA_SUCCESS;
}

/* ---- peer access ----------------------------------------------------------- */

/* A session is given one GPU, so no device has a peer: the answers below
 * are what CUDA gives on a machine with one GPU. */

static CUresult check_dev(CUdevice dev)
{
	int32_t n;
	CUresult r = gc_dev_count(&n);
	if (r != CUDA_SUCCESS)
		return r;
	return dev >= 0 && dev < n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	if (canAccessPeer == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = check_dev(dev);
	if (r == CUDA_SUCCESS)
		r = check_dev(peerDev);
	if (r == CUDA_SUCCESS)
		*canAccessPeer = 0;
	return r;
}

CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice, CUdevice dstDevice)
{
	if (value == NULL || attrib < CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ||
	    attrib > CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = check_dev(srcDevice);
	if (r == CUDA_SUCCESS)
		r = check_dev(dstDevice);
	if (r == CUDA_SUCCESS && srcDevice == dstDevice)
		r = CUDA_ERROR_INVALID_DEVICE; /* a device is not its own peer */
	return r;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (peerContext == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	int mine, theirs;
	if ((r = gc_ctx_dev(ctx, &mine)) != CUDA_SUCCESS || (r = gc_ctx_dev(GC_H(peerContext), &theirs)) != CUDA_SUCCESS)
		return r;
	/* Both are on the session's one GPU: peer access to oneself is not
	 * a thing CUDA allows. */
	return CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (peerContext == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}
