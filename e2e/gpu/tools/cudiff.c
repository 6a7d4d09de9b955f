/* cudiff: an LD_PRELOAD library that records what a CUDA program asks of
 * whichever libcuda.so.1 it loads (NVIDIA's driver or gpuctl's) and what
 * each answer was, in a form that two runs of the same program can be
 * diffed by: per call, the set of distinct (arguments, answers) it was
 * made with. e2e/gpu/cudiff.sh runs a program natively and through gpuctl
 * under it and prints the first answers that differ.
 *
 *   gcc -O2 -shared -fPIC -o cudiff.so cudiff.c -ldl -lpthread
 *   CUDIFF_OUT=run.txt LD_PRELOAD=./cudiff.so PROGRAM...
 *
 * How it sits above the driver. The CUDA runtime and NVIDIA's libraries
 * find driver functions with dlsym and cuGetProcAddress, and the driver's
 * private tables with cuGetExportTable. This library replaces dlsym; a
 * driver function it knows (FORMS below) is handed out as a wrapper that
 * calls the function the driver handed out, with the same arguments, and
 * records them and what came back. It exports no cu* symbol, so a driver
 * library's calls to its own functions are never diverted; a program that
 * links against libcuda and calls it directly is not traced (the runtime,
 * cuBLAS, cuDNN and PyTorch all resolve through dlsym). Export tables are
 * handed out as copies whose slots are wrappers: the slots whose meaning
 * is known (docs/export-tables.md) are recorded with their answers, the
 * others only counted. CUDART_INTERFACE and INTEGRITY_CHECK are passed
 * through untouched, because the runtime's integrity hash covers their
 * addresses.
 *
 * Output, appended to CUDIFF_OUT: "= SEQ LINE" the first time a distinct
 * LINE is seen, written at once so that a crash keeps everything before
 * it (SEQ counts the traced calls made until then, so the lines are in
 * order of first use); at exit "# COUNT LINE" for every line and
 * "# COUNT ET uuid[slot]" for every counted slot. A LINE is
 * "call arguments -> result answers". Handles that differ from run to run
 * are written by role: functions and kernels by their names, contexts and
 * streams by the order they were first seen in (ctx1, s1), device and
 * host pointers not at all.
 *
 * CUDIFF_TABLES=0 leaves export tables unwrapped.
 *
 * dlsym(RTLD_NEXT, ...) called by another library resolves relative to
 * this one, as with any dlsym interposer; the CUDA libraries do not use
 * it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The driver's types, as plain C types (ABI-identical to cuda.h's), so
 * that this file builds without a CUDA toolkit. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long u64;

/* CUlaunchAttribute and CUlaunchConfig (CUDA 11.8 and later). */
struct launch_attr {
	int id;
	char pad[4];
	union {
		char raw[64];
		int i;
		struct {
			unsigned x, y, z;
		} dim;
	} v;
};
struct launch_config {
	unsigned gx, gy, gz, bx, by, bz, smem;
	void *stream;
	struct launch_attr *attrs;
	unsigned nattrs;
};
enum { ATTR_COOPERATIVE = 2, ATTR_CLUSTER = 4, ATTR_PROG_EVENT = 7, ATTR_COMPLETION_EVENT = 12 };

/* ---- output ---------------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int out_fd = -1; /* -1: tracing is off */
static int tables_on = 1;
static void *(*real_dlsym)(void *, const char *);

static void init(void)
{
	real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (real_dlsym == NULL)
		real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	const char *path = getenv("CUDIFF_OUT");
	if (path == NULL || *path == 0)
		return;
	out_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (out_fd < 0) {
		char msg[512];
		int n = snprintf(msg, sizeof msg, "cudiff: cannot write %s: %s; not tracing\n", path, strerror(errno));
		if (write(2, msg, n > 0 ? (size_t)n : 0) < 0)
			return;
		return;
	}
	const char *t = getenv("CUDIFF_TABLES");
	tables_on = t == NULL || strcmp(t, "0") != 0;
}

static void write_all(const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(out_fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w, n -= (size_t)w;
	}
}

/* The distinct lines seen, with how often and when each was first seen. */
struct seen {
	char *line;
	u64 hash, count, seq;
};
static struct seen *tab;
static size_t tab_n, tab_cap;
static u64 calls;

static u64 fnv(const char *s)
{
	u64 h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static struct seen *slot_of(struct seen *t, size_t cap, const char *line, u64 h) /* mu held */
{
	for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
		if (t[i].line == NULL || (t[i].hash == h && strcmp(t[i].line, line) == 0))
			return &t[i];
}

static void grow(void) /* mu held */
{
	size_t nc = tab_cap ? 2 * tab_cap : 1024;
	struct seen *nt = calloc(nc, sizeof *nt);
	if (nt == NULL)
		return;
	for (size_t i = 0; i < tab_cap; i++)
		if (tab[i].line != NULL)
			*slot_of(nt, nc, tab[i].line, tab[i].hash) = tab[i];
	free(tab);
	tab = nt, tab_cap = nc;
}

struct line {
	char s[4096];
	size_t n;
};

static void put(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct line *l, const char *fmt, ...)
{
	if (l->n >= sizeof l->s - 1)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(l->s + l->n, sizeof l->s - l->n, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->n = l->n + (size_t)n < sizeof l->s ? l->n + (size_t)n : sizeof l->s - 1;
}

static void record(struct line *l)
{
	int saved = errno;
	for (size_t i = 0; i < l->n; i++) /* one line per call, whatever a name holds */
		if (l->s[i] == '\n')
			l->s[i] = ' ';
	u64 h = fnv(l->s);
	pthread_mutex_lock(&mu);
	calls++;
	if (2 * (tab_n + 1) > tab_cap)
		grow();
	if (tab_cap > 0) {
		struct seen *e = slot_of(tab, tab_cap, l->s, h);
		if (e->line == NULL && (e->line = strdup(l->s)) != NULL) {
			e->hash = h, e->seq = calls;
			tab_n++;
			char head[32];
			int n = snprintf(head, sizeof head, "= %llu ", calls);
			write_all(head, (size_t)n);
			write_all(l->s, l->n);
			write_all("\n", 1);
		}
		if (e->line != NULL)
			e->count++;
	}
	pthread_mutex_unlock(&mu);
	errno = saved;
}

/* ---- names for handles ------------------------------------------------------ */

/* A map from a handle to its name: functions and kernels by the name they
 * were looked up by, contexts and streams by the order they were first
 * seen in. Names are never freed, so a caller may keep one. */
struct label {
	uintptr_t key;
	char *name;
};
struct labels {
	struct label *e;
	size_t n, cap;
	int next;
	const char *prefix;
};
static struct labels ctxs = { .prefix = "ctx" }, streams = { .prefix = "s" }, funcs = { .prefix = "fn#" };

static struct label *label_slot(struct labels *m, uintptr_t key) /* mu held; NULL when full */
{
	if (2 * (m->n + 1) > m->cap) {
		size_t nc = m->cap ? 2 * m->cap : 256;
		struct label *ne = calloc(nc, sizeof *ne);
		if (ne == NULL)
			return NULL;
		for (size_t i = 0; i < m->cap; i++) {
			if (m->e[i].key == 0)
				continue;
			size_t j = (m->e[i].key * 0x9e3779b97f4a7c15ull >> 7) & (nc - 1);
			while (ne[j].key != 0)
				j = (j + 1) & (nc - 1);
			ne[j] = m->e[i];
		}
		free(m->e);
		m->e = ne, m->cap = nc;
	}
	size_t j = (key * 0x9e3779b97f4a7c15ull >> 7) & (m->cap - 1);
	while (m->e[j].key != 0 && m->e[j].key != key)
		j = (j + 1) & (m->cap - 1);
	return &m->e[j];
}

/* name_of: the handle's name, a new numbered one when it has none. */
static const char *name_of(struct labels *m, const void *h)
{
	uintptr_t key = (uintptr_t)h;
	pthread_mutex_lock(&mu);
	struct label *l = label_slot(m, key);
	const char *name = "?";
	if (l != NULL) {
		if (l->key == 0) {
			char buf[32];
			snprintf(buf, sizeof buf, "%s%d", m->prefix, ++m->next);
			if ((l->name = strdup(buf)) != NULL) {
				l->key = key;
				m->n++;
			}
		}
		if (l->name != NULL)
			name = l->name;
	}
	pthread_mutex_unlock(&mu);
	return name;
}

static void set_name(struct labels *m, const void *h, const char *name)
{
	if (h == NULL || name == NULL)
		return;
	char *copy = strndup(name, 1000);
	if (copy == NULL)
		return;
	pthread_mutex_lock(&mu);
	struct label *l = label_slot(m, (uintptr_t)h);
	if (l != NULL) {
		if (l->key == 0)
			m->n++;
		l->key = (uintptr_t)h;
		l->name = copy; /* a replaced name is leaked: someone may hold it */
	} else {
		free(copy);
	}
	pthread_mutex_unlock(&mu);
}

static const char *ctx_name(const void *c) { return c == NULL ? "0" : name_of(&ctxs, c); }
static const char *fn_name(const void *f) { return f == NULL ? "0" : name_of(&funcs, f); }
static const char *stream_name(const void *s)
{
	if (s == NULL)
		return "0";
	if (s == (void *)1)
		return "legacy";
	if (s == (void *)2)
		return "per-thread";
	return name_of(&streams, s);
}

static void hexbytes(struct line *l, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		put(l, "%02x", b[i]);
}

/* ---- wrapped driver functions --------------------------------------------------- */

/* FORMS lists the driver functions recorded: the name logged, the name
 * cuGetProcAddress is asked for and the versions [min, max) at which it
 * hands out this form (max 0: no end), whether the call takes a stream
 * (its per-thread-default-stream form is then logged apart, with "_pt"),
 * and the exported names that have this signature, for dlsym. */
#define FORMS(X)                                                                                                   \
	X(cuGetProcAddress, "cuGetProcAddress", 0, 12000, 0, "cuGetProcAddress")                                   \
	X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, 0, "cuGetProcAddress_v2")                             \
	X(cuGetExportTable, "cuGetExportTable", 0, 0, 0, "cuGetExportTable")                                       \
	X(cuInit, "cuInit", 0, 0, 0, "cuInit")                                                                     \
	X(cuDriverGetVersion, "cuDriverGetVersion", 0, 0, 0, "cuDriverGetVersion")                                 \
	X(cuDeviceGetCount, "cuDeviceGetCount", 0, 0, 0, "cuDeviceGetCount")                                       \
	X(cuDeviceGet, "cuDeviceGet", 0, 0, 0, "cuDeviceGet")                                                      \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 0, 0, 0, "cuDeviceGetAttribute")                           \
	X(cuDeviceGetName, "cuDeviceGetName", 0, 0, 0, "cuDeviceGetName")                                          \
	X(cuDeviceGetUuid, "cuDeviceGetUuid", 0, 0, 0, "cuDeviceGetUuid", "cuDeviceGetUuid_v2")                    \
	X(cuDeviceGetLuid, "cuDeviceGetLuid", 0, 0, 0, "cuDeviceGetLuid")                                          \
	X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0, 0, "cuDeviceTotalMem_v2")                              \
	X(cuDeviceComputeCapability, "cuDeviceComputeCapability", 0, 0, 0, "cuDeviceComputeCapability")           \
	X(cuDeviceGetProperties, "cuDeviceGetProperties", 0, 0, 0, "cuDeviceGetProperties")                        \
	X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 0, 0, 0, "cuDeviceGetPCIBusId")                              \
	X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 0, 0, 0, "cuDeviceCanAccessPeer")                        \
	X(cuDeviceGetP2PAttribute, "cuDeviceGetP2PAttribute", 0, 0, 0, "cuDeviceGetP2PAttribute")                  \
	X(cuDeviceGetTexture1DLinearMaxWidth, "cuDeviceGetTexture1DLinearMaxWidth", 0, 0, 0,                       \
	  "cuDeviceGetTexture1DLinearMaxWidth")                                                                    \
	X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 0, 0, 0, "cuDeviceGetDefaultMemPool")            \
	X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 0, 0, 0, "cuDevicePrimaryCtxGetState")        \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0, 0, 0, "cuDevicePrimaryCtxRetain")              \
	X(cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags", 0, 0, 0, "cuDevicePrimaryCtxSetFlags",        \
	  "cuDevicePrimaryCtxSetFlags_v2")                                                                         \
	X(cuCtxGetCurrent, "cuCtxGetCurrent", 0, 0, 0, "cuCtxGetCurrent")                                          \
	X(cuCtxGetDevice, "cuCtxGetDevice", 0, 13000, 0, "cuCtxGetDevice")                                         \
	X(cuCtxGetDevice_v2, "cuCtxGetDevice", 13000, 0, 0, "cuCtxGetDevice_v2")                                   \
	X(cuCtxGetLimit, "cuCtxGetLimit", 0, 0, 0, "cuCtxGetLimit")                                                \
	X(cuCtxSetLimit, "cuCtxSetLimit", 0, 0, 0, "cuCtxSetLimit")                                                \
	X(cuCtxGetApiVersion, "cuCtxGetApiVersion", 0, 0, 0, "cuCtxGetApiVersion")                                 \
	X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange", 0, 0, 0, "cuCtxGetStreamPriorityRange")      \
	X(cuCtxGetFlags, "cuCtxGetFlags", 0, 0, 0, "cuCtxGetFlags")                                                \
	X(cuCtxGetCacheConfig, "cuCtxGetCacheConfig", 0, 0, 0, "cuCtxGetCacheConfig")                              \
	X(cuCtxGetSharedMemConfig, "cuCtxGetSharedMemConfig", 0, 0, 0, "cuCtxGetSharedMemConfig")                  \
	X(cuCtxGetId, "cuCtxGetId", 0, 0, 0, "cuCtxGetId")                                                         \
	X(cuCtxSynchronize, "cuCtxSynchronize", 0, 13000, 0, "cuCtxSynchronize")                                   \
	X(cuCtxSynchronize_v2, "cuCtxSynchronize", 13000, 0, 0, "cuCtxSynchronize_v2")                             \
	X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, 0, "cuMemGetInfo_v2")                                          \
	X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, 0, "cuMemAlloc_v2")                                                \
	X(cuPointerGetAttribute, "cuPointerGetAttribute", 0, 0, 0, "cuPointerGetAttribute")                        \
	X(cuPointerGetAttributes, "cuPointerGetAttributes", 0, 0, 0, "cuPointerGetAttributes")                     \
	X(cuStreamCreate, "cuStreamCreate", 0, 0, 0, "cuStreamCreate")                                             \
	X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 0, 0, 0, "cuStreamCreateWithPriority")         \
	X(cuStreamSynchronize, "cuStreamSynchronize", 0, 0, 1, "cuStreamSynchronize", "cuStreamSynchronize_ptsz")  \
	X(cuModuleLoadData, "cuModuleLoadData", 0, 0, 0, "cuModuleLoadData")                                       \
	X(cuModuleLoadDataEx, "cuModuleLoadDataEx", 0, 0, 0, "cuModuleLoadDataEx")                                 \
	X(cuModuleLoadFatBinary, "cuModuleLoadFatBinary", 0, 0, 0, "cuModuleLoadFatBinary")                        \
	X(cuModuleGetFunction, "cuModuleGetFunction", 0, 0, 0, "cuModuleGetFunction")                              \
	X(cuModuleGetLoadingMode, "cuModuleGetLoadingMode", 0, 0, 0, "cuModuleGetLoadingMode")                     \
	X(cuLibraryLoadData, "cuLibraryLoadData", 0, 0, 0, "cuLibraryLoadData")                                    \
	X(cuLibraryGetKernel, "cuLibraryGetKernel", 0, 0, 0, "cuLibraryGetKernel")                                 \
	X(cuKernelGetFunction, "cuKernelGetFunction", 0, 0, 0, "cuKernelGetFunction")                              \
	X(cuKernelGetAttribute, "cuKernelGetAttribute", 0, 0, 0, "cuKernelGetAttribute")                           \
	X(cuKernelSetAttribute, "cuKernelSetAttribute", 0, 0, 0, "cuKernelSetAttribute")                           \
	X(cuKernelGetName, "cuKernelGetName", 0, 0, 0, "cuKernelGetName")                                          \
	X(cuFuncGetAttribute, "cuFuncGetAttribute", 0, 0, 0, "cuFuncGetAttribute")                                 \
	X(cuFuncSetAttribute, "cuFuncSetAttribute", 0, 0, 0, "cuFuncSetAttribute")                                 \
	X(cuFuncGetName, "cuFuncGetName", 0, 0, 0, "cuFuncGetName")                                                \
	X(cuFuncSetCacheConfig, "cuFuncSetCacheConfig", 0, 0, 0, "cuFuncSetCacheConfig")                           \
	X(cuFuncGetParamInfo, "cuFuncGetParamInfo", 0, 0, 0, "cuFuncGetParamInfo")                                 \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", 0, 0, 0,     \
	  "cuOccupancyMaxActiveBlocksPerMultiprocessor")                                                           \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", \
	  0, 0, 0, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")                                         \
	X(cuOccupancyMaxPotentialBlockSize, "cuOccupancyMaxPotentialBlockSize", 0, 0, 0,                           \
	  "cuOccupancyMaxPotentialBlockSize")                                                                      \
	X(cuOccupancyMaxPotentialBlockSizeWithFlags, "cuOccupancyMaxPotentialBlockSizeWithFlags", 0, 0, 0,         \
	  "cuOccupancyMaxPotentialBlockSizeWithFlags")                                                             \
	X(cuOccupancyAvailableDynamicSMemPerBlock, "cuOccupancyAvailableDynamicSMemPerBlock", 0, 0, 0,             \
	  "cuOccupancyAvailableDynamicSMemPerBlock")                                                               \
	X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", 0, 0, 0, "cuOccupancyMaxActiveClusters")   \
	X(cuOccupancyMaxPotentialClusterSize, "cuOccupancyMaxPotentialClusterSize", 0, 0, 0,                       \
	  "cuOccupancyMaxPotentialClusterSize")                                                                    \
	X(cuLaunchKernel, "cuLaunchKernel", 0, 0, 1, "cuLaunchKernel", "cuLaunchKernel_ptsz")                      \
	X(cuLaunchKernelEx, "cuLaunchKernelEx", 0, 0, 1, "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz")              \
	X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 0, 0, 1, "cuLaunchCooperativeKernel",            \
	  "cuLaunchCooperativeKernel_ptsz")                                                                        \
	X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", 0, 0, 0, "cuTensorMapEncodeTiled")                     \
	X(cuLinkAddData_v2, "cuLinkAddData", 6050, 0, 0, "cuLinkAddData_v2")                                       \
	X(cuLinkComplete, "cuLinkComplete", 0, 0, 0, "cuLinkComplete")

#define F_ENUM(n, ...) F_##n,
enum { FORMS(F_ENUM) NFORMS };
#define F_NAME(n, ...) #n,
static const char *const form_name[NFORMS] = { FORMS(F_NAME) };

/* Each form has NV wrapper functions, so that NV distinct driver pointers
 * handed out for it (a per-thread form, or two libraries' answers) each
 * get one that calls exactly that pointer. */
enum { NV = 6 };
static void *real[NFORMS][NV];
static unsigned char per_thread[NFORMS][NV];

#define REAL(n, v, type) ((type)real[F_##n][v])

static void begin(struct line *l, int form, int v)
{
	l->n = 0;
	put(l, "%s%s", form_name[form], per_thread[form][v] ? "_pt" : "");
}

#define EXPAND(...) __VA_ARGS__
#define VARIANT(n, i, params, args) \
	static CUresult n##_w##i params { return i_##n(i, EXPAND args); }
#define VARIANTS(n, params, args)                                                                              \
	VARIANT(n, 0, params, args) VARIANT(n, 1, params, args) VARIANT(n, 2, params, args)                    \
	VARIANT(n, 3, params, args) VARIANT(n, 4, params, args) VARIANT(n, 5, params, args)                    \
	static void *const w_##n[NV] = { (void *)n##_w0, (void *)n##_w1, (void *)n##_w2,                       \
					 (void *)n##_w3, (void *)n##_w4, (void *)n##_w5 };
#define VARIANT0(n, i) \
	static CUresult n##_w##i(void) { return i_##n(i); }
#define VARIANTS0(n)                                                                                           \
	VARIANT0(n, 0) VARIANT0(n, 1) VARIANT0(n, 2) VARIANT0(n, 3) VARIANT0(n, 4) VARIANT0(n, 5)              \
	static void *const w_##n[NV] = { (void *)n##_w0, (void *)n##_w1, (void *)n##_w2,                       \
					 (void *)n##_w3, (void *)n##_w4, (void *)n##_w5 };

static void *wrap_lookup(const char *sym, int version, u64 flags, void *p);
static void *wrap_table(const unsigned char *uuid, void *table);

/* -- look-ups -- */

static CUresult i_cuGetProcAddress(int v, const char *sym, void **pfn, int ver, u64 flags)
{
	CUresult r = REAL(cuGetProcAddress, v, CUresult (*)(const char *, void **, int, u64))(sym, pfn, ver, flags);
	struct line l;
	begin(&l, F_cuGetProcAddress, v);
	put(&l, " sym=%s ver=%d flags=%llu -> %d%s", sym ? sym : "NULL", ver, flags, r,
	    r == 0 && pfn != NULL && *pfn != NULL ? " fn" : "");
	record(&l);
	if (r == 0 && pfn != NULL && *pfn != NULL && sym != NULL)
		*pfn = wrap_lookup(sym, ver, flags, *pfn);
	return r;
}
VARIANTS(cuGetProcAddress, (const char *sym, void **pfn, int ver, u64 flags), (sym, pfn, ver, flags))

static CUresult i_cuGetProcAddress_v2(int v, const char *sym, void **pfn, int ver, u64 flags, int *status)
{
	CUresult r = REAL(cuGetProcAddress_v2, v, CUresult (*)(const char *, void **, int, u64, int *))(sym, pfn, ver,
													   flags, status);
	struct line l;
	begin(&l, F_cuGetProcAddress_v2, v);
	put(&l, " sym=%s ver=%d flags=%llu -> %d", sym ? sym : "NULL", ver, flags, r);
	if (status != NULL)
		put(&l, " status=%d", *status);
	if (r == 0 && pfn != NULL && *pfn != NULL)
		put(&l, " fn");
	record(&l);
	if (r == 0 && pfn != NULL && *pfn != NULL && sym != NULL)
		*pfn = wrap_lookup(sym, ver, flags, *pfn);
	return r;
}
VARIANTS(cuGetProcAddress_v2, (const char *sym, void **pfn, int ver, u64 flags, int *status),
	 (sym, pfn, ver, flags, status))

static CUresult i_cuGetExportTable(int v, const void **pp, const unsigned char *id)
{
	CUresult r = REAL(cuGetExportTable, v, CUresult (*)(const void **, const unsigned char *))(pp, id);
	struct line l;
	begin(&l, F_cuGetExportTable, v);
	put(&l, " uuid=");
	if (id != NULL)
		hexbytes(&l, id, 16);
	put(&l, " -> %d", r);
	if (r == 0 && pp != NULL && *pp != NULL) {
		uintptr_t w0 = *(const uintptr_t *)*pp;
		if (w0 < 0x10000)
			put(&l, " size=%#lx", (unsigned long)w0);
		else
			put(&l, " unsized");
	}
	record(&l);
	if (r == 0 && pp != NULL && *pp != NULL && id != NULL && tables_on)
		*pp = wrap_table(id, (void *)*pp);
	return r;
}
VARIANTS(cuGetExportTable, (const void **pp, const unsigned char *id), (pp, id))

/* -- devices -- */

static CUresult i_cuInit(int v, unsigned flags)
{
	CUresult r = REAL(cuInit, v, CUresult (*)(unsigned))(flags);
	struct line l;
	begin(&l, F_cuInit, v);
	put(&l, " flags=%u -> %d", flags, r);
	record(&l);
	return r;
}
VARIANTS(cuInit, (unsigned flags), (flags))

/* One int written through an out pointer, the commonest shape. */
#define INT_OUT(n)                                                                              \
	static CUresult i_##n(int v, int *out)                                                                 \
	{                                                                                                      \
		CUresult r = REAL(n, v, CUresult (*)(int *))(out);                                             \
		struct line l;                                                                                 \
		begin(&l, F_##n, v);                                                                           \
		put(&l, " -> %d", r);                                                                          \
		if (r == 0 && out != NULL)                                                                     \
			put(&l, " v=%d", *out);                                                                \
		record(&l);                                                                                    \
		return r;                                                                                      \
	}                                                                                                      \
	VARIANTS(n, (int *out), (out))
INT_OUT(cuDriverGetVersion)
INT_OUT(cuDeviceGetCount)
INT_OUT(cuCtxGetFlags)
INT_OUT(cuCtxGetCacheConfig)
INT_OUT(cuCtxGetSharedMemConfig)
INT_OUT(cuModuleGetLoadingMode)

static CUresult i_cuDeviceGet(int v, CUdevice *dev, int ordinal)
{
	CUresult r = REAL(cuDeviceGet, v, CUresult (*)(CUdevice *, int))(dev, ordinal);
	struct line l;
	begin(&l, F_cuDeviceGet, v);
	put(&l, " ordinal=%d -> %d", ordinal, r);
	if (r == 0 && dev != NULL)
		put(&l, " dev=%d", *dev);
	record(&l);
	return r;
}
VARIANTS(cuDeviceGet, (CUdevice * dev, int ordinal), (dev, ordinal))

static CUresult i_cuDeviceGetAttribute(int v, int *pi, int attr, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetAttribute, v, CUresult (*)(int *, int, CUdevice))(pi, attr, dev);
	struct line l;
	begin(&l, F_cuDeviceGetAttribute, v);
	put(&l, " attr=%d dev=%d -> %d", attr, dev, r);
	if (r == 0 && pi != NULL)
		put(&l, " v=%d", *pi);
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetAttribute, (int *pi, int attr, CUdevice dev), (pi, attr, dev))

static CUresult i_cuDeviceGetName(int v, char *name, int len, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetName, v, CUresult (*)(char *, int, CUdevice))(name, len, dev);
	struct line l;
	begin(&l, F_cuDeviceGetName, v);
	put(&l, " len=%d dev=%d -> %d", len, dev, r);
	if (r == 0 && name != NULL && len > 0)
		put(&l, " name=%.*s", len, name);
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetName, (char *name, int len, CUdevice dev), (name, len, dev))

static CUresult i_cuDeviceGetUuid(int v, unsigned char *uuid, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetUuid, v, CUresult (*)(unsigned char *, CUdevice))(uuid, dev);
	struct line l;
	begin(&l, F_cuDeviceGetUuid, v);
	put(&l, " dev=%d -> %d", dev, r);
	if (r == 0 && uuid != NULL) {
		put(&l, " uuid=");
		hexbytes(&l, uuid, 16);
	}
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetUuid, (unsigned char *uuid, CUdevice dev), (uuid, dev))

static CUresult i_cuDeviceGetLuid(int v, char *luid, unsigned *mask, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetLuid, v, CUresult (*)(char *, unsigned *, CUdevice))(luid, mask, dev);
	struct line l;
	begin(&l, F_cuDeviceGetLuid, v);
	put(&l, " dev=%d -> %d", dev, r);
	if (r == 0 && luid != NULL && mask != NULL) {
		put(&l, " luid=");
		hexbytes(&l, luid, 8);
		put(&l, " mask=%u", *mask);
	}
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetLuid, (char *luid, unsigned *mask, CUdevice dev), (luid, mask, dev))

static CUresult i_cuDeviceTotalMem_v2(int v, size_t *bytes, CUdevice dev)
{
	CUresult r = REAL(cuDeviceTotalMem_v2, v, CUresult (*)(size_t *, CUdevice))(bytes, dev);
	struct line l;
	begin(&l, F_cuDeviceTotalMem_v2, v);
	put(&l, " dev=%d -> %d", dev, r);
	if (r == 0 && bytes != NULL)
		put(&l, " bytes=%zu", *bytes);
	record(&l);
	return r;
}
VARIANTS(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev), (bytes, dev))

static CUresult i_cuDeviceComputeCapability(int v, int *major, int *minor, CUdevice dev)
{
	CUresult r = REAL(cuDeviceComputeCapability, v, CUresult (*)(int *, int *, CUdevice))(major, minor, dev);
	struct line l;
	begin(&l, F_cuDeviceComputeCapability, v);
	put(&l, " dev=%d -> %d", dev, r);
	if (r == 0 && major != NULL && minor != NULL)
		put(&l, " cc=%d.%d", *major, *minor);
	record(&l);
	return r;
}
VARIANTS(cuDeviceComputeCapability, (int *major, int *minor, CUdevice dev), (major, minor, dev))

/* CUdevprop is fourteen ints. */
static CUresult i_cuDeviceGetProperties(int v, int *prop, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetProperties, v, CUresult (*)(int *, CUdevice))(prop, dev);
	struct line l;
	begin(&l, F_cuDeviceGetProperties, v);
	put(&l, " dev=%d -> %d", dev, r);
	if (r == 0 && prop != NULL) {
		put(&l, " prop=");
		for (int i = 0; i < 14; i++)
			put(&l, "%s%d", i ? "," : "", prop[i]);
	}
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetProperties, (int *prop, CUdevice dev), (prop, dev))

static CUresult i_cuDeviceGetPCIBusId(int v, char *id, int len, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetPCIBusId, v, CUresult (*)(char *, int, CUdevice))(id, len, dev);
	struct line l;
	begin(&l, F_cuDeviceGetPCIBusId, v);
	put(&l, " len=%d dev=%d -> %d", len, dev, r);
	if (r == 0 && id != NULL && len > 0)
		put(&l, " id=%.*s", len, id);
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetPCIBusId, (char *id, int len, CUdevice dev), (id, len, dev))

static CUresult i_cuDeviceCanAccessPeer(int v, int *can, CUdevice dev, CUdevice peer)
{
	CUresult r = REAL(cuDeviceCanAccessPeer, v, CUresult (*)(int *, CUdevice, CUdevice))(can, dev, peer);
	struct line l;
	begin(&l, F_cuDeviceCanAccessPeer, v);
	put(&l, " dev=%d peer=%d -> %d", dev, peer, r);
	if (r == 0 && can != NULL)
		put(&l, " v=%d", *can);
	record(&l);
	return r;
}
VARIANTS(cuDeviceCanAccessPeer, (int *can, CUdevice dev, CUdevice peer), (can, dev, peer))

static CUresult i_cuDeviceGetP2PAttribute(int v, int *val, int attr, CUdevice src, CUdevice dst)
{
	CUresult r = REAL(cuDeviceGetP2PAttribute, v, CUresult (*)(int *, int, CUdevice, CUdevice))(val, attr, src, dst);
	struct line l;
	begin(&l, F_cuDeviceGetP2PAttribute, v);
	put(&l, " attr=%d src=%d dst=%d -> %d", attr, src, dst, r);
	if (r == 0 && val != NULL)
		put(&l, " v=%d", *val);
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetP2PAttribute, (int *val, int attr, CUdevice src, CUdevice dst), (val, attr, src, dst))

static CUresult i_cuDeviceGetTexture1DLinearMaxWidth(int v, size_t *w, int format, unsigned channels, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetTexture1DLinearMaxWidth, v, CUresult (*)(size_t *, int, unsigned, CUdevice))(
		w, format, channels, dev);
	struct line l;
	begin(&l, F_cuDeviceGetTexture1DLinearMaxWidth, v);
	put(&l, " format=%d channels=%u dev=%d -> %d", format, channels, dev, r);
	if (r == 0 && w != NULL)
		put(&l, " v=%zu", *w);
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetTexture1DLinearMaxWidth, (size_t *w, int format, unsigned channels, CUdevice dev),
	 (w, format, channels, dev))

static CUresult i_cuDeviceGetDefaultMemPool(int v, void **pool, CUdevice dev)
{
	CUresult r = REAL(cuDeviceGetDefaultMemPool, v, CUresult (*)(void **, CUdevice))(pool, dev);
	struct line l;
	begin(&l, F_cuDeviceGetDefaultMemPool, v);
	put(&l, " dev=%d -> %d", dev, r);
	record(&l);
	return r;
}
VARIANTS(cuDeviceGetDefaultMemPool, (void **pool, CUdevice dev), (pool, dev))

static CUresult i_cuDevicePrimaryCtxGetState(int v, CUdevice dev, unsigned *flags, int *active)
{
	CUresult r = REAL(cuDevicePrimaryCtxGetState, v, CUresult (*)(CUdevice, unsigned *, int *))(dev, flags, active);
	struct line l;
	begin(&l, F_cuDevicePrimaryCtxGetState, v);
	put(&l, " dev=%d -> %d", dev, r);
	if (r == 0 && flags != NULL && active != NULL)
		put(&l, " flags=%#x active=%d", *flags, *active);
	record(&l);
	return r;
}
VARIANTS(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned *flags, int *active), (dev, flags, active))

static CUresult i_cuDevicePrimaryCtxRetain(int v, void **ctx, CUdevice dev)
{
	CUresult r = REAL(cuDevicePrimaryCtxRetain, v, CUresult (*)(void **, CUdevice))(ctx, dev);
	struct line l;
	begin(&l, F_cuDevicePrimaryCtxRetain, v);
	put(&l, " dev=%d -> %d", dev, r);
	if (r == 0 && ctx != NULL)
		put(&l, " ctx=%s", ctx_name(*ctx));
	record(&l);
	return r;
}
VARIANTS(cuDevicePrimaryCtxRetain, (void **ctx, CUdevice dev), (ctx, dev))

static CUresult i_cuDevicePrimaryCtxSetFlags(int v, CUdevice dev, unsigned flags)
{
	CUresult r = REAL(cuDevicePrimaryCtxSetFlags, v, CUresult (*)(CUdevice, unsigned))(dev, flags);
	struct line l;
	begin(&l, F_cuDevicePrimaryCtxSetFlags, v);
	put(&l, " dev=%d flags=%#x -> %d", dev, flags, r);
	record(&l);
	return r;
}
VARIANTS(cuDevicePrimaryCtxSetFlags, (CUdevice dev, unsigned flags), (dev, flags))

/* -- contexts -- */

static CUresult i_cuCtxGetCurrent(int v, void **ctx)
{
	CUresult r = REAL(cuCtxGetCurrent, v, CUresult (*)(void **))(ctx);
	struct line l;
	begin(&l, F_cuCtxGetCurrent, v);
	put(&l, " -> %d", r);
	if (r == 0 && ctx != NULL)
		put(&l, " ctx=%s", ctx_name(*ctx));
	record(&l);
	return r;
}
VARIANTS(cuCtxGetCurrent, (void **ctx), (ctx))

static CUresult i_cuCtxGetDevice(int v, CUdevice *dev)
{
	CUresult r = REAL(cuCtxGetDevice, v, CUresult (*)(CUdevice *))(dev);
	struct line l;
	begin(&l, F_cuCtxGetDevice, v);
	put(&l, " -> %d", r);
	if (r == 0 && dev != NULL)
		put(&l, " dev=%d", *dev);
	record(&l);
	return r;
}
VARIANTS(cuCtxGetDevice, (CUdevice * dev), (dev))

static CUresult i_cuCtxGetDevice_v2(int v, CUdevice *dev, void *ctx)
{
	CUresult r = REAL(cuCtxGetDevice_v2, v, CUresult (*)(CUdevice *, void *))(dev, ctx);
	struct line l;
	begin(&l, F_cuCtxGetDevice_v2, v);
	put(&l, " ctx=%s -> %d", ctx_name(ctx), r);
	if (r == 0 && dev != NULL)
		put(&l, " dev=%d", *dev);
	record(&l);
	return r;
}
VARIANTS(cuCtxGetDevice_v2, (CUdevice * dev, void *ctx), (dev, ctx))

static CUresult i_cuCtxGetLimit(int v, size_t *val, int limit)
{
	CUresult r = REAL(cuCtxGetLimit, v, CUresult (*)(size_t *, int))(val, limit);
	struct line l;
	begin(&l, F_cuCtxGetLimit, v);
	put(&l, " limit=%d -> %d", limit, r);
	if (r == 0 && val != NULL)
		put(&l, " v=%zu", *val);
	record(&l);
	return r;
}
VARIANTS(cuCtxGetLimit, (size_t *val, int limit), (val, limit))

static CUresult i_cuCtxSetLimit(int v, int limit, size_t val)
{
	CUresult r = REAL(cuCtxSetLimit, v, CUresult (*)(int, size_t))(limit, val);
	struct line l;
	begin(&l, F_cuCtxSetLimit, v);
	put(&l, " limit=%d v=%zu -> %d", limit, val, r);
	record(&l);
	return r;
}
VARIANTS(cuCtxSetLimit, (int limit, size_t val), (limit, val))

static CUresult i_cuCtxGetApiVersion(int v, void *ctx, unsigned *ver)
{
	CUresult r = REAL(cuCtxGetApiVersion, v, CUresult (*)(void *, unsigned *))(ctx, ver);
	struct line l;
	begin(&l, F_cuCtxGetApiVersion, v);
	put(&l, " ctx=%s -> %d", ctx_name(ctx), r);
	if (r == 0 && ver != NULL)
		put(&l, " v=%u", *ver);
	record(&l);
	return r;
}
VARIANTS(cuCtxGetApiVersion, (void *ctx, unsigned *ver), (ctx, ver))

static CUresult i_cuCtxGetStreamPriorityRange(int v, int *least, int *greatest)
{
	CUresult r = REAL(cuCtxGetStreamPriorityRange, v, CUresult (*)(int *, int *))(least, greatest);
	struct line l;
	begin(&l, F_cuCtxGetStreamPriorityRange, v);
	put(&l, " -> %d", r);
	if (r == 0)
		put(&l, " least=%d greatest=%d", least ? *least : -99, greatest ? *greatest : -99);
	record(&l);
	return r;
}
VARIANTS(cuCtxGetStreamPriorityRange, (int *least, int *greatest), (least, greatest))

/* A context's unique number: written as is, which is what a library that
 * keys its state by it sees. */
static CUresult i_cuCtxGetId(int v, void *ctx, u64 *id)
{
	CUresult r = REAL(cuCtxGetId, v, CUresult (*)(void *, u64 *))(ctx, id);
	struct line l;
	begin(&l, F_cuCtxGetId, v);
	put(&l, " ctx=%s -> %d", ctx_name(ctx), r);
	if (r == 0 && id != NULL)
		put(&l, " id=%#llx", *id);
	record(&l);
	return r;
}
VARIANTS(cuCtxGetId, (void *ctx, u64 *id), (ctx, id))

static CUresult i_cuCtxSynchronize(int v)
{
	CUresult r = REAL(cuCtxSynchronize, v, CUresult (*)(void))();
	struct line l;
	begin(&l, F_cuCtxSynchronize, v);
	put(&l, " -> %d", r);
	record(&l);
	return r;
}
VARIANTS0(cuCtxSynchronize)

static CUresult i_cuCtxSynchronize_v2(int v, void *ctx)
{
	CUresult r = REAL(cuCtxSynchronize_v2, v, CUresult (*)(void *))(ctx);
	struct line l;
	begin(&l, F_cuCtxSynchronize_v2, v);
	put(&l, " ctx=%s -> %d", ctx_name(ctx), r);
	record(&l);
	return r;
}
VARIANTS(cuCtxSynchronize_v2, (void *ctx), (ctx))

/* -- memory and pointers -- */

/* Free memory changes from run to run; it is written in whole GiB. */
static CUresult i_cuMemGetInfo_v2(int v, size_t *free_, size_t *total)
{
	CUresult r = REAL(cuMemGetInfo_v2, v, CUresult (*)(size_t *, size_t *))(free_, total);
	struct line l;
	begin(&l, F_cuMemGetInfo_v2, v);
	put(&l, " -> %d", r);
	if (r == 0 && free_ != NULL && total != NULL)
		put(&l, " total=%zu free_gib=%zu", *total, *free_ >> 30);
	record(&l);
	return r;
}
VARIANTS(cuMemGetInfo_v2, (size_t *free_, size_t *total), (free_, total))

static CUresult i_cuMemAlloc_v2(int v, u64 *p, size_t n)
{
	CUresult r = REAL(cuMemAlloc_v2, v, CUresult (*)(u64 *, size_t))(p, n);
	struct line l;
	begin(&l, F_cuMemAlloc_v2, v);
	put(&l, " size=%zu -> %d", n, r);
	record(&l);
	return r;
}
VARIANTS(cuMemAlloc_v2, (u64 * p, size_t n), (p, n))

/* ptr_value writes a pointer attribute's value when it says something
 * that does not change from run to run. */
static void ptr_value(struct line *l, int attr, const void *data)
{
	switch (attr) {
	case 1: /* context */
		put(l, " v=%s", ctx_name(*(void *const *)data));
		break;
	case 2: case 6: case 8: case 9: case 10: case 13: case 14: case 15: case 16: case 21:
		put(l, " v=%d", *(const int *)data);
		break;
	case 12: case 18: /* sizes */
		put(l, " v=%zu", *(const size_t *)data);
		break;
	default: /* addresses and ids */
		put(l, " v=*");
	}
}

static CUresult i_cuPointerGetAttribute(int v, void *data, int attr, u64 p)
{
	CUresult r = REAL(cuPointerGetAttribute, v, CUresult (*)(void *, int, u64))(data, attr, p);
	struct line l;
	begin(&l, F_cuPointerGetAttribute, v);
	put(&l, " attr=%d -> %d", attr, r);
	if (r == 0 && data != NULL)
		ptr_value(&l, attr, data);
	record(&l);
	return r;
}
VARIANTS(cuPointerGetAttribute, (void *data, int attr, u64 p), (data, attr, p))

static CUresult i_cuPointerGetAttributes(int v, unsigned n, int *attrs, void **data, u64 p)
{
	CUresult r = REAL(cuPointerGetAttributes, v, CUresult (*)(unsigned, int *, void **, u64))(n, attrs, data, p);
	struct line l;
	begin(&l, F_cuPointerGetAttributes, v);
	put(&l, " n=%u -> %d", n, r);
	for (unsigned i = 0; r == 0 && attrs != NULL && data != NULL && i < n && i < 32; i++) {
		put(&l, " [%d]", attrs[i]);
		if (data[i] != NULL)
			ptr_value(&l, attrs[i], data[i]);
	}
	record(&l);
	return r;
}
VARIANTS(cuPointerGetAttributes, (unsigned n, int *attrs, void **data, u64 p), (n, attrs, data, p))

/* -- streams -- */

static CUresult i_cuStreamCreate(int v, void **s, unsigned flags)
{
	CUresult r = REAL(cuStreamCreate, v, CUresult (*)(void **, unsigned))(s, flags);
	struct line l;
	begin(&l, F_cuStreamCreate, v);
	put(&l, " flags=%#x -> %d", flags, r);
	if (r == 0 && s != NULL)
		put(&l, " s=%s", stream_name(*s));
	record(&l);
	return r;
}
VARIANTS(cuStreamCreate, (void **s, unsigned flags), (s, flags))

static CUresult i_cuStreamCreateWithPriority(int v, void **s, unsigned flags, int prio)
{
	CUresult r = REAL(cuStreamCreateWithPriority, v, CUresult (*)(void **, unsigned, int))(s, flags, prio);
	struct line l;
	begin(&l, F_cuStreamCreateWithPriority, v);
	put(&l, " flags=%#x prio=%d -> %d", flags, prio, r);
	if (r == 0 && s != NULL)
		put(&l, " s=%s", stream_name(*s));
	record(&l);
	return r;
}
VARIANTS(cuStreamCreateWithPriority, (void **s, unsigned flags, int prio), (s, flags, prio))

static CUresult i_cuStreamSynchronize(int v, void *s)
{
	CUresult r = REAL(cuStreamSynchronize, v, CUresult (*)(void *))(s);
	struct line l;
	begin(&l, F_cuStreamSynchronize, v);
	put(&l, " s=%s -> %d", stream_name(s), r);
	record(&l);
	return r;
}
VARIANTS(cuStreamSynchronize, (void *s), (s))

/* -- modules, libraries, kernels and functions -- */

/* magic: the first word of an image (a fatbin wrapper, a fatbin, an ELF
 * cubin or PTX text), which says what kind it is. */
static unsigned magic(const void *image) { return image != NULL ? *(const unsigned *)image : 0; }

static CUresult i_cuModuleLoadData(int v, void **m, const void *image)
{
	CUresult r = REAL(cuModuleLoadData, v, CUresult (*)(void **, const void *))(m, image);
	struct line l;
	begin(&l, F_cuModuleLoadData, v);
	put(&l, " image=%08x -> %d", magic(image), r);
	record(&l);
	return r;
}
VARIANTS(cuModuleLoadData, (void **m, const void *image), (m, image))

static CUresult i_cuModuleLoadDataEx(int v, void **m, const void *image, unsigned n, int *opts, void **vals)
{
	CUresult r = REAL(cuModuleLoadDataEx, v, CUresult (*)(void **, const void *, unsigned, int *, void **))(
		m, image, n, opts, vals);
	struct line l;
	begin(&l, F_cuModuleLoadDataEx, v);
	put(&l, " image=%08x options=%u -> %d", magic(image), n, r);
	record(&l);
	return r;
}
VARIANTS(cuModuleLoadDataEx, (void **m, const void *image, unsigned n, int *opts, void **vals),
	 (m, image, n, opts, vals))

static CUresult i_cuModuleLoadFatBinary(int v, void **m, const void *image)
{
	CUresult r = REAL(cuModuleLoadFatBinary, v, CUresult (*)(void **, const void *))(m, image);
	struct line l;
	begin(&l, F_cuModuleLoadFatBinary, v);
	put(&l, " image=%08x -> %d", magic(image), r);
	record(&l);
	return r;
}
VARIANTS(cuModuleLoadFatBinary, (void **m, const void *image), (m, image))

static CUresult i_cuModuleGetFunction(int v, void **f, void *m, const char *name)
{
	CUresult r = REAL(cuModuleGetFunction, v, CUresult (*)(void **, void *, const char *))(f, m, name);
	if (r == 0 && f != NULL)
		set_name(&funcs, *f, name);
	struct line l;
	begin(&l, F_cuModuleGetFunction, v);
	put(&l, " name=%.1000s -> %d", name ? name : "NULL", r);
	record(&l);
	return r;
}
VARIANTS(cuModuleGetFunction, (void **f, void *m, const char *name), (f, m, name))

static CUresult i_cuLibraryLoadData(int v, void **lib, const void *code, int *jo, void **jv, unsigned nj, int *lo,
				    void **lv, unsigned nl)
{
	CUresult r = REAL(cuLibraryLoadData, v,
			  CUresult (*)(void **, const void *, int *, void **, unsigned, int *, void **, unsigned))(
		lib, code, jo, jv, nj, lo, lv, nl);
	struct line l;
	begin(&l, F_cuLibraryLoadData, v);
	put(&l, " image=%08x jit_options=%u library_options=%u -> %d", magic(code), nj, nl, r);
	record(&l);
	return r;
}
VARIANTS(cuLibraryLoadData,
	 (void **lib, const void *code, int *jo, void **jv, unsigned nj, int *lo, void **lv, unsigned nl),
	 (lib, code, jo, jv, nj, lo, lv, nl))

static CUresult i_cuLibraryGetKernel(int v, void **k, void *lib, const char *name)
{
	CUresult r = REAL(cuLibraryGetKernel, v, CUresult (*)(void **, void *, const char *))(k, lib, name);
	if (r == 0 && k != NULL)
		set_name(&funcs, *k, name);
	struct line l;
	begin(&l, F_cuLibraryGetKernel, v);
	put(&l, " name=%.1000s -> %d", name ? name : "NULL", r);
	record(&l);
	return r;
}
VARIANTS(cuLibraryGetKernel, (void **k, void *lib, const char *name), (k, lib, name))

static CUresult i_cuKernelGetFunction(int v, void **f, void *k)
{
	CUresult r = REAL(cuKernelGetFunction, v, CUresult (*)(void **, void *))(f, k);
	const char *name = fn_name(k);
	if (r == 0 && f != NULL)
		set_name(&funcs, *f, name);
	struct line l;
	begin(&l, F_cuKernelGetFunction, v);
	put(&l, " kernel=%s -> %d", name, r);
	record(&l);
	return r;
}
VARIANTS(cuKernelGetFunction, (void **f, void *k), (f, k))

static CUresult i_cuKernelGetAttribute(int v, int *pi, int attr, void *k, CUdevice dev)
{
	CUresult r = REAL(cuKernelGetAttribute, v, CUresult (*)(int *, int, void *, CUdevice))(pi, attr, k, dev);
	struct line l;
	begin(&l, F_cuKernelGetAttribute, v);
	put(&l, " attr=%d kernel=%s dev=%d -> %d", attr, fn_name(k), dev, r);
	if (r == 0 && pi != NULL)
		put(&l, " v=%d", *pi);
	record(&l);
	return r;
}
VARIANTS(cuKernelGetAttribute, (int *pi, int attr, void *k, CUdevice dev), (pi, attr, k, dev))

static CUresult i_cuKernelSetAttribute(int v, int attr, int val, void *k, CUdevice dev)
{
	CUresult r = REAL(cuKernelSetAttribute, v, CUresult (*)(int, int, void *, CUdevice))(attr, val, k, dev);
	struct line l;
	begin(&l, F_cuKernelSetAttribute, v);
	put(&l, " attr=%d v=%d kernel=%s dev=%d -> %d", attr, val, fn_name(k), dev, r);
	record(&l);
	return r;
}
VARIANTS(cuKernelSetAttribute, (int attr, int val, void *k, CUdevice dev), (attr, val, k, dev))

static CUresult i_cuKernelGetName(int v, const char **name, void *k)
{
	CUresult r = REAL(cuKernelGetName, v, CUresult (*)(const char **, void *))(name, k);
	struct line l;
	begin(&l, F_cuKernelGetName, v);
	put(&l, " kernel=%s -> %d", fn_name(k), r);
	if (r == 0 && name != NULL && *name != NULL)
		put(&l, " name=%.1000s", *name);
	record(&l);
	return r;
}
VARIANTS(cuKernelGetName, (const char **name, void *k), (name, k))

static CUresult i_cuFuncGetAttribute(int v, int *pi, int attr, void *f)
{
	CUresult r = REAL(cuFuncGetAttribute, v, CUresult (*)(int *, int, void *))(pi, attr, f);
	struct line l;
	begin(&l, F_cuFuncGetAttribute, v);
	put(&l, " attr=%d fn=%s -> %d", attr, fn_name(f), r);
	if (r == 0 && pi != NULL)
		put(&l, " v=%d", *pi);
	record(&l);
	return r;
}
VARIANTS(cuFuncGetAttribute, (int *pi, int attr, void *f), (pi, attr, f))

static CUresult i_cuFuncSetAttribute(int v, void *f, int attr, int val)
{
	CUresult r = REAL(cuFuncSetAttribute, v, CUresult (*)(void *, int, int))(f, attr, val);
	struct line l;
	begin(&l, F_cuFuncSetAttribute, v);
	put(&l, " fn=%s attr=%d v=%d -> %d", fn_name(f), attr, val, r);
	record(&l);
	return r;
}
VARIANTS(cuFuncSetAttribute, (void *f, int attr, int val), (f, attr, val))

static CUresult i_cuFuncGetName(int v, const char **name, void *f)
{
	CUresult r = REAL(cuFuncGetName, v, CUresult (*)(const char **, void *))(name, f);
	struct line l;
	begin(&l, F_cuFuncGetName, v);
	put(&l, " fn=%s -> %d", fn_name(f), r);
	if (r == 0 && name != NULL && *name != NULL)
		put(&l, " name=%.1000s", *name);
	record(&l);
	return r;
}
VARIANTS(cuFuncGetName, (const char **name, void *f), (name, f))

static CUresult i_cuFuncSetCacheConfig(int v, void *f, int cfg)
{
	CUresult r = REAL(cuFuncSetCacheConfig, v, CUresult (*)(void *, int))(f, cfg);
	struct line l;
	begin(&l, F_cuFuncSetCacheConfig, v);
	put(&l, " fn=%s config=%d -> %d", fn_name(f), cfg, r);
	record(&l);
	return r;
}
VARIANTS(cuFuncSetCacheConfig, (void *f, int cfg), (f, cfg))

static CUresult i_cuFuncGetParamInfo(int v, void *f, size_t i, size_t *off, size_t *size)
{
	CUresult r = REAL(cuFuncGetParamInfo, v, CUresult (*)(void *, size_t, size_t *, size_t *))(f, i, off, size);
	struct line l;
	begin(&l, F_cuFuncGetParamInfo, v);
	put(&l, " fn=%s index=%zu -> %d", fn_name(f), i, r);
	if (r == 0)
		put(&l, " offset=%zu size=%zu", off ? *off : 0, size ? *size : 0);
	record(&l);
	return r;
}
VARIANTS(cuFuncGetParamInfo, (void *f, size_t i, size_t *off, size_t *size), (f, i, off, size))

/* -- occupancy -- */

static CUresult i_cuOccupancyMaxActiveBlocksPerMultiprocessor(int v, int *n, void *f, int block, size_t dyn)
{
	CUresult r = REAL(cuOccupancyMaxActiveBlocksPerMultiprocessor, v, CUresult (*)(int *, void *, int, size_t))(
		n, f, block, dyn);
	struct line l;
	begin(&l, F_cuOccupancyMaxActiveBlocksPerMultiprocessor, v);
	put(&l, " fn=%s block=%d dyn=%zu -> %d", fn_name(f), block, dyn, r);
	if (r == 0 && n != NULL)
		put(&l, " blocks=%d", *n);
	record(&l);
	return r;
}
VARIANTS(cuOccupancyMaxActiveBlocksPerMultiprocessor, (int *n, void *f, int block, size_t dyn), (n, f, block, dyn))

static CUresult i_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int v, int *n, void *f, int block, size_t dyn,
								     unsigned flags)
{
	CUresult r = REAL(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, v,
			  CUresult (*)(int *, void *, int, size_t, unsigned))(n, f, block, dyn, flags);
	struct line l;
	begin(&l, F_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, v);
	put(&l, " fn=%s block=%d dyn=%zu flags=%u -> %d", fn_name(f), block, dyn, flags, r);
	if (r == 0 && n != NULL)
		put(&l, " blocks=%d", *n);
	record(&l);
	return r;
}
VARIANTS(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, (int *n, void *f, int block, size_t dyn, unsigned flags),
	 (n, f, block, dyn, flags))

typedef size_t (*b2smem)(int);

static CUresult i_cuOccupancyMaxPotentialBlockSize(int v, int *grid, int *block, void *f, b2smem cb, size_t dyn,
						    int limit)
{
	CUresult r = REAL(cuOccupancyMaxPotentialBlockSize, v, CUresult (*)(int *, int *, void *, b2smem, size_t, int))(
		grid, block, f, cb, dyn, limit);
	struct line l;
	begin(&l, F_cuOccupancyMaxPotentialBlockSize, v);
	put(&l, " fn=%s callback=%d dyn=%zu limit=%d -> %d", fn_name(f), cb != NULL, dyn, limit, r);
	if (r == 0 && grid != NULL && block != NULL)
		put(&l, " grid=%d block=%d", *grid, *block);
	record(&l);
	return r;
}
VARIANTS(cuOccupancyMaxPotentialBlockSize, (int *grid, int *block, void *f, b2smem cb, size_t dyn, int limit),
	 (grid, block, f, cb, dyn, limit))

static CUresult i_cuOccupancyMaxPotentialBlockSizeWithFlags(int v, int *grid, int *block, void *f, b2smem cb,
							     size_t dyn, int limit, unsigned flags)
{
	CUresult r = REAL(cuOccupancyMaxPotentialBlockSizeWithFlags, v,
			  CUresult (*)(int *, int *, void *, b2smem, size_t, int, unsigned))(grid, block, f, cb, dyn, limit,
											    flags);
	struct line l;
	begin(&l, F_cuOccupancyMaxPotentialBlockSizeWithFlags, v);
	put(&l, " fn=%s callback=%d dyn=%zu limit=%d flags=%u -> %d", fn_name(f), cb != NULL, dyn, limit, flags, r);
	if (r == 0 && grid != NULL && block != NULL)
		put(&l, " grid=%d block=%d", *grid, *block);
	record(&l);
	return r;
}
VARIANTS(cuOccupancyMaxPotentialBlockSizeWithFlags,
	 (int *grid, int *block, void *f, b2smem cb, size_t dyn, int limit, unsigned flags),
	 (grid, block, f, cb, dyn, limit, flags))

static CUresult i_cuOccupancyAvailableDynamicSMemPerBlock(int v, size_t *smem, void *f, int blocks, int block)
{
	CUresult r = REAL(cuOccupancyAvailableDynamicSMemPerBlock, v, CUresult (*)(size_t *, void *, int, int))(
		smem, f, blocks, block);
	struct line l;
	begin(&l, F_cuOccupancyAvailableDynamicSMemPerBlock, v);
	put(&l, " fn=%s blocks=%d block=%d -> %d", fn_name(f), blocks, block, r);
	if (r == 0 && smem != NULL)
		put(&l, " smem=%zu", *smem);
	record(&l);
	return r;
}
VARIANTS(cuOccupancyAvailableDynamicSMemPerBlock, (size_t *smem, void *f, int blocks, int block),
	 (smem, f, blocks, block))

/* launch_config writes a CUlaunchConfig: grid, block, shared memory,
 * stream and attributes (cluster shapes and cooperative spelled out,
 * events as "ev", others as their first int). */
static void launch_config(struct line *l, const struct launch_config *c)
{
	if (c == NULL) {
		put(l, " config=NULL");
		return;
	}
	put(l, " grid=%ux%ux%u block=%ux%ux%u smem=%u stream=%s", c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem,
	    stream_name(c->stream));
	for (unsigned i = 0; c->attrs != NULL && i < c->nattrs && i < 16; i++) {
		const struct launch_attr *a = &c->attrs[i];
		switch (a->id) {
		case ATTR_CLUSTER:
			put(l, " cluster=%ux%ux%u", a->v.dim.x, a->v.dim.y, a->v.dim.z);
			break;
		case ATTR_COOPERATIVE:
			put(l, " cooperative=%d", a->v.i);
			break;
		case ATTR_PROG_EVENT:
		case ATTR_COMPLETION_EVENT:
			put(l, " a%d=ev", a->id);
			break;
		default:
			put(l, " a%d=%d", a->id, a->v.i);
		}
	}
}

static CUresult i_cuOccupancyMaxActiveClusters(int v, int *n, void *f, const struct launch_config *c)
{
	CUresult r = REAL(cuOccupancyMaxActiveClusters, v, CUresult (*)(int *, void *, const struct launch_config *))(
		n, f, c);
	struct line l;
	begin(&l, F_cuOccupancyMaxActiveClusters, v);
	put(&l, " fn=%s", fn_name(f));
	launch_config(&l, c);
	put(&l, " -> %d", r);
	if (r == 0 && n != NULL)
		put(&l, " clusters=%d", *n);
	record(&l);
	return r;
}
VARIANTS(cuOccupancyMaxActiveClusters, (int *n, void *f, const struct launch_config *c), (n, f, c))

static CUresult i_cuOccupancyMaxPotentialClusterSize(int v, int *n, void *f, const struct launch_config *c)
{
	CUresult r = REAL(cuOccupancyMaxPotentialClusterSize, v,
			  CUresult (*)(int *, void *, const struct launch_config *))(n, f, c);
	struct line l;
	begin(&l, F_cuOccupancyMaxPotentialClusterSize, v);
	put(&l, " fn=%s", fn_name(f));
	launch_config(&l, c);
	put(&l, " -> %d", r);
	if (r == 0 && n != NULL)
		put(&l, " size=%d", *n);
	record(&l);
	return r;
}
VARIANTS(cuOccupancyMaxPotentialClusterSize, (int *n, void *f, const struct launch_config *c), (n, f, c))

/* -- launches -- */

static CUresult i_cuLaunchKernel(int v, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				 unsigned bz, unsigned smem, void *s, void **params, void **extra)
{
	CUresult r = REAL(cuLaunchKernel, v,
			  CUresult (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
				       void **, void **))(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
	struct line l;
	begin(&l, F_cuLaunchKernel, v);
	put(&l, " fn=%s grid=%ux%ux%u block=%ux%ux%u smem=%u stream=%s -> %d", fn_name(f), gx, gy, gz, bx, by, bz,
	    smem, stream_name(s), r);
	record(&l);
	return r;
}
VARIANTS(cuLaunchKernel,
	 (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,
	  void *s, void **params, void **extra),
	 (f, gx, gy, gz, bx, by, bz, smem, s, params, extra))

static CUresult i_cuLaunchKernelEx(int v, const struct launch_config *c, void *f, void **params, void **extra)
{
	CUresult r = REAL(cuLaunchKernelEx, v, CUresult (*)(const struct launch_config *, void *, void **, void **))(
		c, f, params, extra);
	struct line l;
	begin(&l, F_cuLaunchKernelEx, v);
	put(&l, " fn=%s", fn_name(f));
	launch_config(&l, c);
	put(&l, " -> %d", r);
	record(&l);
	return r;
}
VARIANTS(cuLaunchKernelEx, (const struct launch_config *c, void *f, void **params, void **extra),
	 (c, f, params, extra))

static CUresult i_cuLaunchCooperativeKernel(int v, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
					    unsigned by, unsigned bz, unsigned smem, void *s, void **params)
{
	CUresult r = REAL(cuLaunchCooperativeKernel, v,
			  CUresult (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
				       void **))(f, gx, gy, gz, bx, by, bz, smem, s, params);
	struct line l;
	begin(&l, F_cuLaunchCooperativeKernel, v);
	put(&l, " fn=%s grid=%ux%ux%u block=%ux%ux%u smem=%u stream=%s -> %d", fn_name(f), gx, gy, gz, bx, by, bz,
	    smem, stream_name(s), r);
	record(&l);
	return r;
}
VARIANTS(cuLaunchCooperativeKernel,
	 (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,
	  void *s, void **params),
	 (f, gx, gy, gz, bx, by, bz, smem, s, params))

/* -- tensor maps and linking -- */

static void u64s(struct line *l, const char *what, const u64 *p, unsigned n)
{
	put(l, " %s=", what);
	for (unsigned i = 0; p != NULL && i < n && i < 5; i++)
		put(l, "%s%llu", i ? "," : "", p[i]);
}

static void u32s(struct line *l, const char *what, const unsigned *p, unsigned n)
{
	put(l, " %s=", what);
	for (unsigned i = 0; p != NULL && i < n && i < 5; i++)
		put(l, "%s%u", i ? "," : "", p[i]);
}

/* The descriptor itself holds the global address, so only the arguments
 * and the result are written. */
static CUresult i_cuTensorMapEncodeTiled(int v, void *map, int dtype, unsigned rank, void *addr, const u64 *dims,
					 const u64 *strides, const unsigned *box, const unsigned *estrides, int interleave,
					 int swizzle, int l2, int oob)
{
	CUresult r = REAL(cuTensorMapEncodeTiled, v,
			  CUresult (*)(void *, int, unsigned, void *, const u64 *, const u64 *, const unsigned *,
				       const unsigned *, int, int, int, int))(map, dtype, rank, addr, dims, strides, box,
									      estrides, interleave, swizzle, l2, oob);
	struct line l;
	begin(&l, F_cuTensorMapEncodeTiled, v);
	put(&l, " dtype=%d rank=%u", dtype, rank);
	u64s(&l, "dims", dims, rank);
	u64s(&l, "strides", strides, rank > 0 ? rank - 1 : 0);
	u32s(&l, "box", box, rank);
	u32s(&l, "elem_strides", estrides, rank);
	put(&l, " interleave=%d swizzle=%d l2=%d oob=%d -> %d", interleave, swizzle, l2, oob, r);
	record(&l);
	return r;
}
VARIANTS(cuTensorMapEncodeTiled,
	 (void *map, int dtype, unsigned rank, void *addr, const u64 *dims, const u64 *strides, const unsigned *box,
	  const unsigned *estrides, int interleave, int swizzle, int l2, int oob),
	 (map, dtype, rank, addr, dims, strides, box, estrides, interleave, swizzle, l2, oob))

static CUresult i_cuLinkAddData_v2(int v, void *st, int type, void *data, size_t size, const char *name, unsigned n,
				   int *opts, void **vals)
{
	CUresult r = REAL(cuLinkAddData_v2, v,
			  CUresult (*)(void *, int, void *, size_t, const char *, unsigned, int *, void **))(
		st, type, data, size, name, n, opts, vals);
	struct line l;
	begin(&l, F_cuLinkAddData_v2, v);
	put(&l, " type=%d size=%zu -> %d", type, size, r);
	record(&l);
	return r;
}
VARIANTS(cuLinkAddData_v2,
	 (void *st, int type, void *data, size_t size, const char *name, unsigned n, int *opts, void **vals),
	 (st, type, data, size, name, n, opts, vals))

static CUresult i_cuLinkComplete(int v, void *st, void **out, size_t *size)
{
	CUresult r = REAL(cuLinkComplete, v, CUresult (*)(void *, void **, size_t *))(st, out, size);
	struct line l;
	begin(&l, F_cuLinkComplete, v);
	put(&l, " -> %d", r);
	if (r == 0 && size != NULL)
		put(&l, " size=%zu", *size);
	record(&l);
	return r;
}
VARIANTS(cuLinkComplete, (void *st, void **out, size_t *size), (st, out, size))

/* ---- the table of forms and the hand-out --------------------------------------- */

struct form {
	const char *base;
	int minver, maxver, streams;
	const char *syms[3];
	void *const *wrap;
};
#define F_ROW(n, b, mi, ma, st, ...) { b, mi, ma, st, { __VA_ARGS__ }, w_##n },
static const struct form forms[NFORMS] = { FORMS(F_ROW) };
static int nvariants[NFORMS];

/* wrap_form hands out form f's wrapper for driver pointer p, giving p a
 * wrapper of its own the first time it is seen; p itself when the form's
 * wrappers are used up (the call then goes untraced, which is noted). */
static void *wrap_form(int f, void *p, int pt)
{
	for (int i = 0; i < NV; i++)
		if (p == forms[f].wrap[i])
			return p; /* already a wrapper */
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nvariants[f]; i++) {
		if (real[f][i] == p && per_thread[f][i] == pt) {
			pthread_mutex_unlock(&mu);
			return forms[f].wrap[i];
		}
	}
	void *w = p;
	if (nvariants[f] < NV) {
		int i = nvariants[f]++;
		real[f][i] = p;
		per_thread[f][i] = (unsigned char)pt;
		w = forms[f].wrap[i];
	}
	pthread_mutex_unlock(&mu);
	if (w == p) {
		struct line l = { .n = 0 };
		put(&l, "! %s: more than %d driver functions handed out; the rest go untraced", form_name[f], NV);
		record(&l);
	}
	return w;
}

static void *wrap_lookup(const char *sym, int version, u64 flags, void *p)
{
	for (int f = 0; f < NFORMS; f++) {
		const struct form *x = &forms[f];
		if (strcmp(x->base, sym) == 0 && version >= x->minver && (x->maxver == 0 || version < x->maxver))
			return wrap_form(f, p, x->streams && (flags & 2) != 0);
	}
	return p;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

void *dlsym(void *handle, const char *sym)
{
	pthread_once(&once, init);
	if (real_dlsym == NULL)
		return NULL;
	void *p = real_dlsym(handle, sym);
	if (out_fd < 0 || sym[0] != 'c' || sym[1] != 'u' || sym[2] < 'A' || sym[2] > 'Z')
		return p;
	struct line l = { .n = 0 };
	put(&l, "dlsym %s -> %s", sym, p != NULL ? "found" : "missing");
	record(&l);
	if (p == NULL)
		return p;
	for (int f = 0; f < NFORMS; f++)
		for (int i = 0; i < 3 && forms[f].syms[i] != NULL; i++)
			if (strcmp(forms[f].syms[i], sym) == 0)
				return wrap_form(f, p, forms[f].streams && (ends_with(sym, "_ptsz") || ends_with(sym, "_ptds")));
	return p;
}

/* ---- export tables ------------------------------------------------------------------- */

/* Slots whose meaning is known (docs/export-tables.md) are recorded with
 * their answers through typed wrappers; every other slot of a wrapped
 * table gets a thunk that counts its calls and jumps to the driver's
 * function, which works whatever the slot's arguments are. */

enum {
	S_TLS_CTX,          /* TOOLS_TLS[2] */
	S_LT_CTX_NUMBER,    /* cuBLASLt's table [4] */
	S_LT_STREAM_NUMBER, /* [39] */
	S_LT_STREAM_OBJECT, /* [51] */
	S_CHECKS_CTX,       /* CONTEXT_CHECKS[2] */
	S_CHECKS_GLOBAL,    /* [3] */
	S_HOOKS_2,          /* TOOLS_RUNTIME_CALLBACK_HOOKS[2] */
	S_HOOKS_6,          /* [6] */
	S_CLS_PUT,          /* CONTEXT_LOCAL_STORAGE[0] */
	S_CLS_DELETE,       /* [1] */
	S_CLS_GET,          /* [2] */
	S_TOPO_LAYOUT,      /* CLUSTER_TOPOLOGY (1734dc26)[4] */
	S_TOPO_CLUSTERS,    /* [8] */
	S_TOPO_RELEASE,     /* [13] */
	S_TOPO_ONE,         /* [14] */
	S_DECODED,
};
static void *et_real[S_DECODED];

/* The decoders take and pass on six integer arguments, all the System V
 * ABI passes in registers, whatever the slot's own count: a slot that
 * takes more arguments than its established meaning says still gets them,
 * and one that takes fewer ignores the rest. */
typedef u64 (*et_fn)(u64, u64, u64, u64, u64, u64);
#define ET_ARGS u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5
#define ET_CALL(id) ((et_fn)et_real[id])(a0, a1, a2, a3, a4, a5)

/* (CUcontext *out): the calling thread's context. */
static u64 et_tls_ctx(ET_ARGS)
{
	u64 ret = ET_CALL(S_TLS_CTX);
	CUresult r = (CUresult)ret;
	void **ctx = (void **)a0;
	struct line l = { .n = 0 };
	put(&l, "ET 42d85a81[2] -> %d", r);
	if (r == 0 && ctx != NULL)
		put(&l, " ctx=%s", ctx_name(*ctx));
	record(&l);
	return ret;
}

/* (CUcontext, unsigned long long *out): the context's number. */
static u64 et_lt_ctx_number(ET_ARGS)
{
	u64 ret = ET_CALL(S_LT_CTX_NUMBER);
	CUresult r = (CUresult)ret;
	u64 *n = (u64 *)a1;
	struct line l = { .n = 0 };
	put(&l, "ET 21318c60[4] ctx=%s -> %d", ctx_name((void *)a0), r);
	if (r == 0 && n != NULL)
		put(&l, " number=%#llx", *n);
	record(&l);
	return ret;
}

/* (CUcontext, stream object, unsigned long long *out): its number. */
static u64 et_lt_stream_number(ET_ARGS)
{
	u64 ret = ET_CALL(S_LT_STREAM_NUMBER);
	CUresult r = (CUresult)ret;
	u64 *n = (u64 *)a2;
	struct line l = { .n = 0 };
	put(&l, "ET 21318c60[39] ctx=%s -> %d", ctx_name((void *)a0), r);
	if (r == 0 && n != NULL)
		put(&l, " number=%#llx", *n);
	record(&l);
	return ret;
}

/* (CUcontext, CUstream, void **out, int per_thread): the stream's object. */
static u64 et_lt_stream_object(ET_ARGS)
{
	u64 ret = ET_CALL(S_LT_STREAM_OBJECT);
	CUresult r = (CUresult)ret;
	void *s = (void *)a1, **obj = (void **)a2;
	struct line l = { .n = 0 };
	put(&l, "ET 21318c60[51] ctx=%s stream=%s per_thread=%d -> %d", ctx_name((void *)a0), stream_name(s), (int)a3, r);
	if (r == 0 && obj != NULL)
		put(&l, " object=%s", *obj == NULL ? "0" : *obj == s ? "the stream" : "other");
	record(&l);
	return ret;
}

/* (CUcontext, uint32_t *flags, const void **extra). */
static u64 et_checks_ctx(ET_ARGS)
{
	u64 ret = ET_CALL(S_CHECKS_CTX);
	CUresult r = (CUresult)ret;
	uint32_t *flags = (uint32_t *)a1;
	const void **extra = (const void **)a2;
	struct line l = { .n = 0 };
	put(&l, "ET 263e8860[2] ctx=%s -> %d", ctx_name((void *)a0), r);
	/* The driver writes extra only for a context of kind 1; otherwise
	 * it holds whatever the caller left there. */
	if (r == 0)
		put(&l, " flags=%#x", flags ? *flags : 0);
	if (r == 0 && flags != NULL && *flags == 1)
		put(&l, " extra=%s", extra && *extra ? "set" : "0");
	record(&l);
	return ret;
}

/* () -> a 32-bit value. */
static u64 et_checks_global(ET_ARGS)
{
	u64 ret = ET_CALL(S_CHECKS_GLOBAL);
	struct line l = { .n = 0 };
	put(&l, "ET 263e8860[3] -> %#x", (uint32_t)ret);
	record(&l);
	return ret;
}

/* (void **buf, size_t *n), no result. */
static u64 et_hooks(int which, ET_ARGS)
{
	u64 ret = ET_CALL(which);
	size_t *n = (size_t *)a1;
	struct line l = { .n = 0 };
	put(&l, "ET a094798c[%d] -> size=%zu", which == S_HOOKS_2 ? 2 : 6, n ? *n : 0);
	record(&l);
	return ret;
}
static u64 et_hooks_2(ET_ARGS) { return et_hooks(S_HOOKS_2, a0, a1, a2, a3, a4, a5); }
static u64 et_hooks_6(ET_ARGS) { return et_hooks(S_HOOKS_6, a0, a1, a2, a3, a4, a5); }

/* Context-local storage holds the runtime's own pointers: results only.
 * Put is (CUcontext, key, value, destructor), get (void **value,
 * CUcontext, key). */
static u64 et_cls(int which, int slot, const void *ctx, ET_ARGS)
{
	u64 ret = ET_CALL(which);
	struct line l = { .n = 0 };
	put(&l, "ET c693336e[%d]", slot);
	if (slot != 1)
		put(&l, " ctx=%s", ctx_name(ctx));
	put(&l, " -> %d", (CUresult)ret);
	record(&l);
	return ret;
}
static u64 et_cls_put(ET_ARGS) { return et_cls(S_CLS_PUT, 0, (void *)a0, a0, a1, a2, a3, a4, a5); }
static u64 et_cls_delete(ET_ARGS) { return et_cls(S_CLS_DELETE, 1, NULL, a0, a1, a2, a3, a4, a5); }
static u64 et_cls_get(ET_ARGS) { return et_cls(S_CLS_GET, 2, (void *)a1, a0, a1, a2, a3, a4, a5); }

/* (void **gpc, void **local): the TPC layout, one byte per TPC. The
 * count is not returned; the first 32 TPCs show the order. */
static u64 et_topo_layout(ET_ARGS)
{
	u64 ret = ET_CALL(S_TOPO_LAYOUT);
	CUresult r = (CUresult)ret;
	unsigned char **g = (unsigned char **)a0, **lo = (unsigned char **)a1;
	struct line l = { .n = 0 };
	put(&l, "ET 1734dc26[4] -> %d", r);
	if (r == 0 && g != NULL && lo != NULL && *g != NULL && *lo != NULL) {
		put(&l, " gpc=");
		for (int i = 0; i < 32; i++)
			put(&l, "%x", (*g)[i] & 15);
		put(&l, " local=");
		for (int i = 0; i < 32; i++)
			put(&l, "%x", (*lo)[i] & 15);
	}
	record(&l);
	return ret;
}

/* (int dev, int *out): whether the device launches clusters. */
static u64 et_topo_clusters(ET_ARGS)
{
	u64 ret = ET_CALL(S_TOPO_CLUSTERS);
	int *v = (int *)a1;
	struct line l = { .n = 0 };
	put(&l, "ET 1734dc26[8] dev=%d -> %d", (int)a0, (CUresult)ret);
	if ((CUresult)ret == 0 && v != NULL)
		put(&l, " v=%d", *v);
	record(&l);
	return ret;
}

/* (void *, void *): frees slot 4's buffers. */
static u64 et_topo_release(ET_ARGS)
{
	u64 ret = ET_CALL(S_TOPO_RELEASE);
	struct line l = { .n = 0 };
	put(&l, "ET 1734dc26[13] -> %d", (CUresult)ret);
	record(&l);
	return ret;
}

/* (int *out): 1. */
static u64 et_topo_one(ET_ARGS)
{
	u64 ret = ET_CALL(S_TOPO_ONE);
	int *v = (int *)a0;
	struct line l = { .n = 0 };
	put(&l, "ET 1734dc26[14] -> %d", (CUresult)ret);
	if ((CUresult)ret == 0 && v != NULL)
		put(&l, " v=%d", *v);
	record(&l);
	return ret;
}

static const struct {
	const char *uuid8;
	int slot, id;
	void *fn;
} decoders[] = {
	{ "42d85a81", 2, S_TLS_CTX, (void *)et_tls_ctx },
	{ "21318c60", 4, S_LT_CTX_NUMBER, (void *)et_lt_ctx_number },
	{ "21318c60", 39, S_LT_STREAM_NUMBER, (void *)et_lt_stream_number },
	{ "21318c60", 51, S_LT_STREAM_OBJECT, (void *)et_lt_stream_object },
	{ "263e8860", 2, S_CHECKS_CTX, (void *)et_checks_ctx },
	{ "263e8860", 3, S_CHECKS_GLOBAL, (void *)et_checks_global },
	{ "a094798c", 2, S_HOOKS_2, (void *)et_hooks_2 },
	{ "a094798c", 6, S_HOOKS_6, (void *)et_hooks_6 },
	{ "c693336e", 0, S_CLS_PUT, (void *)et_cls_put },
	{ "c693336e", 1, S_CLS_DELETE, (void *)et_cls_delete },
	{ "c693336e", 2, S_CLS_GET, (void *)et_cls_get },
	{ "1734dc26", 4, S_TOPO_LAYOUT, (void *)et_topo_layout },
	{ "1734dc26", 8, S_TOPO_CLUSTERS, (void *)et_topo_clusters },
	{ "1734dc26", 13, S_TOPO_RELEASE, (void *)et_topo_release },
	{ "1734dc26", 14, S_TOPO_ONE, (void *)et_topo_one },
};

/* A counting thunk (x86-64): lock incq counter; jmpq *target. */
struct thunk {
	unsigned char code[16];
	u64 count;
	void *target;
};
_Static_assert(sizeof(struct thunk) == 32, "thunk layout");

static struct thunk *thunk_new(void *target) /* mu held */
{
#if defined(__x86_64__)
	static struct thunk *pool;
	static size_t used, cap;
	if (used == cap) {
		size_t n = 2048;
		void *m = mmap(NULL, n * sizeof(struct thunk), PROT_READ | PROT_WRITE | PROT_EXEC,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return NULL;
		pool = m, used = 0, cap = n;
	}
	struct thunk *t = &pool[used++];
	/* lock incq 8(%rip) -> count at +16; jmpq *10(%rip) -> target at +24 */
	static const unsigned char code[16] = { 0xf0, 0x48, 0xff, 0x05, 0x08, 0, 0, 0,
						0xff, 0x25, 0x0a, 0, 0, 0, 0xcc, 0xcc };
	memcpy(t->code, code, sizeof code);
	t->count = 0;
	t->target = target;
	return t;
#else
	(void)target;
	return NULL;
#endif
}

/* The wrapped tables, by UUID; each keeps its thunks to report counts. */
enum { MAX_TABLES = 32, MAX_SLOTS = 256 };
static struct wrapped {
	char uuid[33];
	void **copy;
	size_t words;
	struct thunk *thunks[MAX_SLOTS];
} wrapped[MAX_TABLES];
static int nwrapped;

static void *wrap_table(const unsigned char *id, void *table)
{
	char hex[33];
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	/* The runtime's integrity hash covers these two tables' addresses. */
	if (strncmp(hex, "6bd5fb6c", 8) == 0 || strncmp(hex, "d4082055", 8) == 0)
		return table;
	void **t = table;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nwrapped; i++) {
		if (strcmp(wrapped[i].uuid, hex) == 0) {
			pthread_mutex_unlock(&mu);
			return wrapped[i].copy;
		}
	}
	if (nwrapped == MAX_TABLES) {
		pthread_mutex_unlock(&mu);
		return table;
	}
	/* A size word (bytes) first, or (context-local storage) functions up
	 * to a NULL. */
	size_t words, first;
	if ((uintptr_t)t[0] < 0x10000) {
		words = (uintptr_t)t[0] / sizeof(void *), first = 1;
	} else {
		for (words = 0; words < 16 && t[words] != NULL; words++)
			;
		words++, first = 0;
	}
	if (words > MAX_SLOTS)
		words = MAX_SLOTS;
	void **copy = calloc(words, sizeof *copy);
	if (copy == NULL) {
		pthread_mutex_unlock(&mu);
		return table;
	}
	struct wrapped *w = &wrapped[nwrapped];
	memcpy(copy, t, words * sizeof *copy);
	for (size_t s = first; s < words; s++) {
		if (copy[s] == NULL)
			continue;
		int decoded = 0;
		for (size_t d = 0; d < sizeof decoders / sizeof decoders[0]; d++) {
			if (strncmp(hex, decoders[d].uuid8, 8) == 0 && (size_t)decoders[d].slot == s) {
				et_real[decoders[d].id] = copy[s];
				copy[s] = decoders[d].fn;
				decoded = 1;
			}
		}
		if (!decoded && (w->thunks[s] = thunk_new(copy[s])) != NULL)
			copy[s] = w->thunks[s];
	}
	snprintf(w->uuid, sizeof w->uuid, "%s", hex);
	w->copy = copy;
	w->words = words;
	nwrapped++;
	pthread_mutex_unlock(&mu);
	return copy;
}

/* ---- at exit -------------------------------------------------------------------------- */

__attribute__((destructor)) static void finish(void)
{
	if (out_fd < 0)
		return;
	pthread_mutex_lock(&mu);
	char buf[128];
	for (size_t i = 0; i < tab_cap; i++) {
		if (tab[i].line == NULL)
			continue;
		int n = snprintf(buf, sizeof buf, "# %llu ", tab[i].count);
		write_all(buf, (size_t)n);
		write_all(tab[i].line, strlen(tab[i].line));
		write_all("\n", 1);
	}
	for (int i = 0; i < nwrapped; i++) {
		for (size_t s = 0; s < wrapped[i].words; s++) {
			const struct thunk *t = wrapped[i].thunks[s];
			u64 n = t != NULL ? __atomic_load_n(&t->count, __ATOMIC_RELAXED) : 0;
			if (n == 0)
				continue;
			int k = snprintf(buf, sizeof buf, "# %llu ET %.8s[%zu]\n", n, wrapped[i].uuid, s);
			write_all(buf, (size_t)k);
		}
	}
	pthread_mutex_unlock(&mu);
}
