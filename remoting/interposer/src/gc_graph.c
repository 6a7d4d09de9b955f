/* Streams, stream capture and CUDA graphs, kept in the client.
 *
 * A capture records the work submitted to a capturing stream as graph
 * nodes instead of sending it; the dependencies follow the streams that
 * take part (a stream joins by waiting on an event recorded in a
 * capturing stream). cuGraphInstantiate orders a graph's nodes
 * topologically into an executable graph, and cuGraphLaunch sends its
 * nodes as ordinary asynchronous requests on the launch stream, in that
 * order: a valid schedule of the graph, run without a single round trip.
 * The server holds no graph state, so graphs need nothing at checkpoint,
 * restore or migration, and both device backends run them alike.
 *
 * The launch path outside capture pays one relaxed load (gc_captures);
 * everything here runs under one mutex. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "gc_core.h"
#include "gc_ext.h"
#include "../gen/gc_ops.h"
#include "../gen/gc_undef.h"

_Atomic int gc_captures;

static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;

/* ---- graphs ------------------------------------------------------------- */

struct CUgraphNode_st {
	CUgraphNodeType type;
	struct CUgraph_st *g;
	struct CUgraphNode_st **deps;
	size_t ndeps, capdeps;
	uint64_t ctx;
	uint64_t mark; /* for walks */
	size_t idx;    /* position, while instantiating */
	/* kernel; cluster and lflags as captured from cuLaunchKernelEx or
	 * cuLaunchCooperativeKernel (zero: a plain launch) */
	CUfunction f;
	unsigned int grid[3], block[3], shared;
	unsigned int cluster[3];
	uint32_t lflags;
	uint8_t *params;
	size_t nparams;
	void **kparams; /* pointers into params, for cuGraphKernelNodeGetParams */
	/* memcpy, memset, host, events, memory operations */
	CUDA_MEMCPY3D copy;
	CUDA_MEMSET_NODE_PARAMS ms;
	CUhostFn fn;
	void *user;
	CUevent ev;
	int wait, width;
	CUdeviceptr addr;
	uint64_t value;
	unsigned int flags;
	/* in an executable graph: the node it was copied from */
	struct CUgraphNode_st *orig;
};

struct CUgraph_st {
	CUgraphNode *nodes;
	size_t n, cap;
};

struct CUgraphExec_st {
	CUgraphNode *nodes; /* copies, in launch order */
	size_t n;
};

static uint64_t walk_gen;

static void node_free(CUgraphNode nd)
{
	free(nd->deps);
	free(nd->params);
	free(nd->kparams);
	free(nd);
}

static int push_ptr(void ***arr, size_t *n, size_t *cap, void *p)
{
	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 8;
		void **na = realloc(*arr, nc * sizeof *na);
		if (na == NULL)
			return -1;
		*arr = na;
		*cap = nc;
	}
	(*arr)[(*n)++] = p;
	return 0;
}

static int has_dep(CUgraphNode nd, CUgraphNode d)
{
	for (size_t i = 0; i < nd->ndeps; i++)
		if (nd->deps[i] == d)
			return 1;
	return 0;
}

/* node_new adds a node of type to g after deps. gmu held. */
static CUresult node_new(CUgraph g, CUgraphNodeType type, CUgraphNode const *deps, size_t ndeps, uint64_t ctx,
			 CUgraphNode *out)
{
	for (size_t i = 0; i < ndeps; i++)
		if (deps == NULL || deps[i] == NULL || deps[i]->g != g)
			return CUDA_ERROR_INVALID_VALUE;
	CUgraphNode nd = calloc(1, sizeof *nd);
	if (nd == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	nd->type = type;
	nd->g = g;
	nd->ctx = ctx;
	for (size_t i = 0; i < ndeps; i++) {
		if (has_dep(nd, deps[i]))
			continue; /* a duplicate edge */
		if (push_ptr((void ***)&nd->deps, &nd->ndeps, &nd->capdeps, deps[i]) < 0) {
			node_free(nd);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	if (push_ptr((void ***)&g->nodes, &g->n, &g->cap, nd) < 0) {
		node_free(nd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = nd;
	return CUDA_SUCCESS;
}

/* set_kernel fills a kernel node's launch from CUDA_KERNEL_NODE_PARAMS
 * fields, packing the parameters now (they are captured by value). f is
 * a function of the node's context (see node_fn). */
static CUresult set_kernel(CUgraphNode nd, CUfunction f, const unsigned int grid[3], const unsigned int block[3],
			   unsigned int shared, void **kernelParams, void **extra)
{
	uint8_t *buf;
	size_t n;
	CUresult r = gc_pack_params(f, kernelParams, extra, &buf, &n);
	if (r != CUDA_SUCCESS)
		return r;
	void **kp = NULL;
	if (f->nparams > 0) {
		if ((kp = malloc(f->nparams * sizeof *kp)) == NULL) {
			free(buf);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		for (uint32_t i = 0; i < f->nparams; i++)
			kp[i] = buf + f->pairs[2 * i];
	}
	free(nd->params);
	free(nd->kparams);
	nd->f = f;
	memcpy(nd->grid, grid, sizeof nd->grid);
	memcpy(nd->block, block, sizeof nd->block);
	nd->shared = shared;
	nd->params = buf;
	nd->nparams = n;
	nd->kparams = kp;
	return CUDA_SUCCESS;
}

/* ---- streams -------------------------------------------------------------- */

struct capture;

/* A stream this client created, with what the API lets one ask about it
 * and its part in a capture. */
struct strm {
	uint64_t h, ctx;
	unsigned int flags;
	int prio;
	struct capture *cap;
	CUgraphNode *front; /* the capture's dependencies for the next node */
	size_t nfront, capfront;
};

static struct strm **streams;
static size_t nstreams, capstreams;

static struct strm *stream_find(uint64_t h) /* gmu held */
{
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i]->h == h)
			return streams[i];
	return NULL;
}

static int is_special(CUstream s) { return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

/* ---- captures ---------------------------------------------------------------- */

struct capevent {
	uint64_t ev;
	CUgraphNode *front;
	size_t n, cap;
};

struct capture {
	uint64_t id;
	CUstreamCaptureMode mode;
	int invalid;
	pthread_t thread;
	CUgraph g;
	struct strm *origin;
	uint64_t ctx;
	struct capevent *evs;
	size_t nevs, capevs;
};

static struct capture **caps;
static size_t ncaps, capcaps;
static uint64_t next_capture_id = 1;

/* The calling thread's capture mode (cuThreadExchangeStreamCaptureMode). */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static int set_front(struct strm *st, CUgraphNode const *deps, size_t n) /* gmu held */
{
	st->nfront = 0;
	for (size_t i = 0; i < n; i++)
		if (push_ptr((void ***)&st->front, &st->nfront, &st->capfront, deps[i]) < 0)
			return -1;
	return 0;
}

static int add_front(struct strm *st, CUgraphNode const *deps, size_t n) /* gmu held */
{
	for (size_t i = 0; i < n; i++) {
		int have = 0;
		for (size_t j = 0; j < st->nfront && !have; j++)
			have = st->front[j] == deps[i];
		if (!have && push_ptr((void ***)&st->front, &st->nfront, &st->capfront, deps[i]) < 0)
			return -1;
	}
	return 0;
}

/* capture_end takes every stream out of c and forgets c. gmu held. */
static void capture_end(struct capture *c)
{
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i]->cap == c) {
			streams[i]->cap = NULL;
			streams[i]->nfront = 0;
		}
	for (size_t i = 0; i < c->nevs; i++)
		free(c->evs[i].front);
	free(c->evs);
	for (size_t i = 0; i < ncaps; i++)
		if (caps[i] == c) {
			caps[i] = caps[--ncaps];
			break;
		}
	atomic_fetch_sub(&gc_captures, 1);
	free(c);
}

static void graph_free(CUgraph g)
{
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	free(g);
}

/* capturing returns the stream record of s when s is capturing. gmu held. */
static struct strm *capturing(CUstream s)
{
	if (is_special(s))
		return NULL;
	struct strm *st = stream_find(GC_H(s));
	return st != NULL && st->cap != NULL ? st : NULL;
}

/* implicit reports whether work on the legacy stream of ctx would
 * synchronise with a capturing (blocking) stream, and invalidates those
 * captures: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT. gmu held. */
static int implicit(uint64_t ctx)
{
	int hit = 0;
	for (size_t i = 0; i < nstreams; i++) {
		struct strm *st = streams[i];
		if (st->cap != NULL && st->ctx == ctx && (st->flags & CU_STREAM_NON_BLOCKING) == 0) {
			st->cap->invalid = 1;
			hit = 1;
		}
	}
	return hit;
}

/* record appends a node of type to the capture of st and makes it the
 * stream's frontier. An invalidated capture records nothing. gmu held. */
static CUresult record(struct strm *st, CUgraphNodeType type, CUgraphNode *out)
{
	struct capture *c = st->cap;
	if (c->invalid)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	CUgraphNode nd;
	CUresult r = node_new(c->g, type, st->front, st->nfront, st->ctx, &nd);
	if (r == CUDA_SUCCESS && set_front(st, &nd, 1) < 0)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r != CUDA_SUCCESS) {
		c->invalid = 1;
		return r;
	}
	*out = nd;
	return CUDA_SUCCESS;
}

/* hook_begin is the common start of the gc_cap_* hooks: it takes gmu and
 * finds the capturing stream; for the legacy stream it applies the
 * implicit-synchronisation rule. Returns 1 with gmu held when s captures,
 * 1 with gmu released and *res set when the call is refused, 0 with gmu
 * released when the call proceeds. */
static int hook_begin(CUstream s, struct strm **st, CUresult *res)
{
	pthread_mutex_lock(&gmu);
	if (s == NULL || s == CU_STREAM_LEGACY) {
		uint64_t ctx;
		if (gc_current_ctx(&ctx) == CUDA_SUCCESS && implicit(ctx)) {
			pthread_mutex_unlock(&gmu);
			*res = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
			return 1;
		}
	}
	if ((*st = capturing(s)) == NULL) {
		pthread_mutex_unlock(&gmu);
		return 0;
	}
	return 1;
}

int gc_cap_launch(CUfunction f, const unsigned int grid[3], const unsigned int block[3], unsigned int shared,
		  const unsigned int cluster[3], uint32_t flags, CUstream s, void **kernelParams, void **extra,
		  CUresult *res)
{
	struct strm *st;
	if (!hook_begin(s, &st, res))
		return 0;
	if (st == NULL)
		return 1;
	CUgraphNode nd;
	*res = f == NULL ? CUDA_ERROR_INVALID_HANDLE : record(st, CU_GRAPH_NODE_TYPE_KERNEL, &nd);
	if (*res == CUDA_SUCCESS && (*res = set_kernel(nd, f, grid, block, shared, kernelParams, extra)) != CUDA_SUCCESS)
		st->cap->invalid = 1;
	if (*res == CUDA_SUCCESS && cluster != NULL)
		memcpy(nd->cluster, cluster, sizeof nd->cluster);
	if (*res == CUDA_SUCCESS)
		nd->lflags = flags;
	pthread_mutex_unlock(&gmu);
	return 1;
}

int gc_cap_copy(const CUDA_MEMCPY3D *p, CUstream s, CUresult *res)
{
	struct strm *st;
	if (!hook_begin(s, &st, res))
		return 0;
	if (st == NULL)
		return 1;
	CUgraphNode nd;
	if ((*res = record(st, CU_GRAPH_NODE_TYPE_MEMCPY, &nd)) == CUDA_SUCCESS)
		nd->copy = *p;
	pthread_mutex_unlock(&gmu);
	return 1;
}

int gc_cap_memset(CUdeviceptr dst, unsigned int value, unsigned int elem, size_t count, CUstream s, CUresult *res)
{
	struct strm *st;
	if (!hook_begin(s, &st, res))
		return 0;
	if (st == NULL)
		return 1;
	CUgraphNode nd;
	if ((*res = record(st, CU_GRAPH_NODE_TYPE_MEMSET, &nd)) == CUDA_SUCCESS)
		nd->ms = (CUDA_MEMSET_NODE_PARAMS){ .dst = dst, .pitch = 0, .value = value, .elementSize = elem, .width = count, .height = 1 };
	pthread_mutex_unlock(&gmu);
	return 1;
}

int gc_cap_memop(CUstream s, int wait, CUdeviceptr addr, uint64_t value, unsigned int flags, int width, CUresult *res)
{
	struct strm *st;
	if (!hook_begin(s, &st, res))
		return 0;
	if (st == NULL)
		return 1;
	CUgraphNode nd;
	if ((*res = record(st, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &nd)) == CUDA_SUCCESS) {
		nd->wait = wait;
		nd->width = width;
		nd->addr = addr;
		nd->value = value;
		nd->flags = flags;
	}
	pthread_mutex_unlock(&gmu);
	return 1;
}

/* capevent_find returns the capture state of event e. gmu held. */
static struct capevent *capevent_find(uint64_t e, struct capture **in)
{
	for (size_t i = 0; i < ncaps; i++)
		for (size_t j = 0; j < caps[i]->nevs; j++)
			if (caps[i]->evs[j].ev == e) {
				*in = caps[i];
				return &caps[i]->evs[j];
			}
	return NULL;
}

static void capevent_drop(uint64_t e) /* gmu held */
{
	struct capture *c;
	struct capevent *ce = capevent_find(e, &c);
	if (ce != NULL) {
		free(ce->front);
		*ce = c->evs[--c->nevs];
	}
}

int gc_cap_event_record(CUevent e, CUstream s, unsigned int flags, CUresult *res)
{
	struct strm *st;
	if (!hook_begin(s, &st, res)) {
		/* Recorded outside capture: whatever it captured before is
		 * over. */
		pthread_mutex_lock(&gmu);
		capevent_drop(GC_H(e));
		pthread_mutex_unlock(&gmu);
		return 0;
	}
	if (st == NULL)
		return 1;
	struct capture *c = st->cap;
	*res = CUDA_SUCCESS;
	if (flags & CU_EVENT_RECORD_EXTERNAL) {
		CUgraphNode nd;
		if ((*res = record(st, CU_GRAPH_NODE_TYPE_EVENT_RECORD, &nd)) == CUDA_SUCCESS)
			nd->ev = e;
	}
	if (*res == CUDA_SUCCESS) {
		capevent_drop(GC_H(e));
		struct capevent ce = { .ev = GC_H(e) };
		for (size_t i = 0; i < st->nfront; i++)
			if (push_ptr((void ***)&ce.front, &ce.n, &ce.cap, st->front[i]) < 0)
				*res = CUDA_ERROR_OUT_OF_MEMORY;
		if (*res == CUDA_SUCCESS && c->nevs == c->capevs) {
			size_t nc = c->capevs ? 2 * c->capevs : 8;
			struct capevent *na = realloc(c->evs, nc * sizeof *na);
			if (na == NULL)
				*res = CUDA_ERROR_OUT_OF_MEMORY;
			else {
				c->evs = na;
				c->capevs = nc;
			}
		}
		if (*res == CUDA_SUCCESS)
			c->evs[c->nevs++] = ce;
		else {
			free(ce.front);
			c->invalid = 1;
		}
	}
	pthread_mutex_unlock(&gmu);
	return 1;
}

int gc_cap_wait_event(CUstream s, CUevent e, unsigned int flags, CUresult *res)
{
	pthread_mutex_lock(&gmu);
	struct capture *ec = NULL;
	struct capevent *ce = capevent_find(GC_H(e), &ec);
	struct strm *st = capturing(s);
	*res = CUDA_SUCCESS;
	if (ce == NULL && st == NULL) {
		pthread_mutex_unlock(&gmu);
		return 0;
	}
	if (ce == NULL) {
		/* A capturing stream waits on an event from outside the
		 * capture: only as an external wait node. */
		CUgraphNode nd;
		if (flags & CU_EVENT_WAIT_EXTERNAL) {
			if ((*res = record(st, CU_GRAPH_NODE_TYPE_WAIT_EVENT, &nd)) == CUDA_SUCCESS)
				nd->ev = e;
		} else {
			st->cap->invalid = 1;
			*res = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
		}
	} else if (is_special(s)) {
		ec->invalid = 1;
		*res = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; /* the legacy stream cannot join a capture */
	} else if (st == NULL) {
		/* The stream joins the capture (a fork). */
		struct strm *js = stream_find(GC_H(s));
		if (js == NULL) {
			*res = CUDA_ERROR_INVALID_HANDLE;
		} else {
			js->cap = ec;
			if (set_front(js, ce->front, ce->n) < 0) {
				ec->invalid = 1;
				*res = CUDA_ERROR_OUT_OF_MEMORY;
			}
		}
	} else if (st->cap != ec) {
		st->cap->invalid = ec->invalid = 1;
		*res = CUDA_ERROR_STREAM_CAPTURE_MERGE;
	} else if (add_front(st, ce->front, ce->n) < 0) {
		ec->invalid = 1;
		*res = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&gmu);
	return 1;
}

int gc_cap_refuse(CUstream s, CUresult *res)
{
	pthread_mutex_lock(&gmu);
	struct strm *st = capturing(s);
	if (st != NULL) {
		st->cap->invalid = 1;
		*res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	pthread_mutex_unlock(&gmu);
	return st != NULL;
}

CUresult gc_cap_unsafe(int legacy)
{
	if (!gc_capture_active())
		return CUDA_SUCCESS;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&gmu);
	uint64_t ctx;
	if (legacy && gc_current_ctx(&ctx) == CUDA_SUCCESS && implicit(ctx))
		r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	if (thread_mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
		pthread_t me = pthread_self();
		for (size_t i = 0; i < ncaps; i++) {
			struct capture *c = caps[i];
			int mine = pthread_equal(c->thread, me) && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
			int global = thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
			if (mine || global) {
				c->invalid = 1;
				if (r == CUDA_SUCCESS)
					r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
			}
		}
	}
	pthread_mutex_unlock(&gmu);
	return r;
}

/* ---- stream calls ---------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned int flags, int prio)
{
	if (ph == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx, h;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	/* Priorities outside the range are clamped, as CUDA does. */
	int least, greatest;
	cuCtxGetStreamPriorityRange(&least, &greatest);
	prio = prio > least ? least : prio < greatest ? greatest : prio;
	if ((r = gc_rpc_StreamCreate(ctx, flags, prio, &h)) != CUDA_SUCCESS)
		return r;
	struct strm *st = calloc(1, sizeof *st);
	if (st == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*st = (struct strm){ .h = h, .ctx = ctx, .flags = flags, .prio = prio };
	pthread_mutex_lock(&gmu);
	r = push_ptr((void ***)&streams, &nstreams, &capstreams, st) < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	pthread_mutex_unlock(&gmu);
	if (r != CUDA_SUCCESS) {
		free(st);
		return r;
	}
	*ph = (CUstream)(uintptr_t)h;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) { return stream_create(phStream, Flags, 0); }

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	return stream_create(phStream, flags, priority);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (is_special(hStream))
		return CUDA_ERROR_INVALID_HANDLE;
	if ((r = gc_rpc_StreamDestroy(ctx, GC_H(hStream))) != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gmu);
	for (size_t i = 0; i < nstreams; i++) {
		if (streams[i]->h == GC_H(hStream)) {
			struct strm *st = streams[i];
			if (st->cap != NULL)
				st->cap->invalid = 1; /* a capture cannot survive its stream */
			streams[i] = streams[--nstreams];
			free(st->front);
			free(st);
			break;
		}
	}
	pthread_mutex_unlock(&gmu);
	return CUDA_SUCCESS;
}

/* sync_check refuses to wait for a capturing stream (there is no work to
 * wait for: it is being recorded), as CUDA does. */
static CUresult sync_check(CUstream s)
{
	if (!gc_capture_active())
		return CUDA_SUCCESS;
	if (is_special(s))
		return gc_cap_unsafe(1);
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&gmu);
	struct strm *st = capturing(s);
	if (st != NULL) {
		st->cap->invalid = 1;
		r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	pthread_mutex_unlock(&gmu);
	return r;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = sync_check(hStream);
	return r != CUDA_SUCCESS ? r : gc_rpc_StreamQuery(ctx, GC_S(hStream));
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = sync_check(hStream);
	return r != CUDA_SUCCESS ? r : gc_rpc_StreamSynchronize(ctx, GC_S(hStream));
}

/* cuCtxSynchronize_v2 is CUDA 13's form, which names its context (NULL:
 * the current one). Either waits for the whole context, which a capture
 * in progress under a strict mode forbids. */
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
	uint64_t c;
	CUresult r = gc_ctx_or_current(ctx, &c);
	if (r == CUDA_SUCCESS)
		r = gc_cap_unsafe(1);
	return r != CUDA_SUCCESS ? r : gc_rpc_CtxSynchronize(c);
}

CUresult CUDAAPI cuCtxSynchronize(void) { return cuCtxSynchronize_v2(NULL); }

/* stream_props answers questions about a stream from the table; the
 * special streams are the current context's default stream. */
static CUresult stream_props(CUstream s, struct strm *out)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (is_special(s)) {
		*out = (struct strm){ .h = 0, .ctx = ctx };
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&gmu);
	struct strm *st = stream_find(GC_H(s));
	if (st != NULL)
		*out = *st;
	pthread_mutex_unlock(&gmu);
	return st != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	if (flags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct strm st;
	CUresult r = stream_props(hStream, &st);
	if (r == CUDA_SUCCESS)
		*flags = st.flags;
	return r;
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
	if (priority == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct strm st;
	CUresult r = stream_props(hStream, &st);
	if (r == CUDA_SUCCESS)
		*priority = st.prio;
	return r;
}

/* cuStreamGetId: the server's driver numbers streams; the NULL stream is
 * the legacy default stream (the per-thread one for the _ptsz form), which
 * travels as CU_STREAM_LEGACY or CU_STREAM_PER_THREAD so that the two
 * keep numbers of their own. */
static CUresult stream_get_id(CUstream s, CUstream null_is, unsigned long long *id)
{
	if (id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (s == NULL)
		s = null_is;
	struct strm st;
	CUresult r = stream_props(s, &st);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t h = is_special(s) ? GC_H(s) : st.h;
	uint64_t v = 0;
	if ((r = gc_rpc_StreamGetId(st.ctx, h, &v)) == CUDA_SUCCESS)
		*id = v;
	return r;
}

CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	return stream_get_id(hStream, CU_STREAM_LEGACY, streamId);
}

CUresult CUDAAPI cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
	return stream_get_id(hStream, CU_STREAM_PER_THREAD, streamId);
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct strm st;
	CUresult r = stream_props(hStream, &st);
	if (r == CUDA_SUCCESS)
		*pctx = (CUcontext)(uintptr_t)st.ctx;
	return r;
}

/* cuLaunchHostFunc runs fn once the stream's earlier work is done: here,
 * by waiting for the stream and calling fn before returning, which keeps
 * CUDA's one promise (fn runs after that work and before later work). */
CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	if (fn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (gc_capture_active()) {
		struct strm *st;
		if (hook_begin(hStream, &st, &r)) {
			if (st == NULL)
				return r;
			CUgraphNode nd;
			if ((r = record(st, CU_GRAPH_NODE_TYPE_HOST, &nd)) == CUDA_SUCCESS) {
				nd->fn = fn;
				nd->user = userData;
			}
			pthread_mutex_unlock(&gmu);
			return r;
		}
	}
	if ((r = gc_rpc_StreamSynchronize(ctx, GC_S(hStream))) != CUDA_SUCCESS)
		return r;
	fn(userData);
	return CUDA_SUCCESS;
}

/* cuStreamAddCallback is the older form of cuLaunchHostFunc: the callback
 * also gets the stream and the stream's status (an error of its earlier
 * work), and it may not be captured. */
CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
	if (callback == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (gc_capture_active()) {
		struct strm *st;
		if (hook_begin(hStream, &st, &r)) {
			if (st == NULL)
				return r;
			pthread_mutex_unlock(&gmu);
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		}
	}
	CUresult status = gc_rpc_StreamSynchronize(ctx, GC_S(hStream));
	if (status == CUDA_ERROR_DEVICE_UNAVAILABLE || status == CUDA_ERROR_INVALID_HANDLE)
		return status;
	callback(hStream, status, userData);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
	return cuStreamAddCallback(hStream == NULL ? CU_STREAM_PER_THREAD : hStream, callback, userData, flags);
}

/* ---- capture calls ------------------------------------------------------------ */

static CUresult begin_capture(CUstream s, CUstreamCaptureMode mode)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	/* The legacy and per-thread default streams are the server's one
	 * default stream, which synchronises with every other: it cannot be
	 * captured. */
	if (is_special(s))
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	struct capture *c = calloc(1, sizeof *c);
	CUgraph g = calloc(1, sizeof *g);
	if (c == NULL || g == NULL) {
		free(c);
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&gmu);
	struct strm *st = stream_find(GC_H(s));
	if (st == NULL)
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (st->cap != NULL)
		r = CUDA_ERROR_ILLEGAL_STATE;
	else if (push_ptr((void ***)&caps, &ncaps, &capcaps, c) < 0)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r != CUDA_SUCCESS) {
		pthread_mutex_unlock(&gmu);
		free(c);
		free(g);
		return r;
	}
	*c = (struct capture){ .id = next_capture_id++, .mode = mode, .thread = pthread_self(), .g = g, .origin = st, .ctx = ctx };
	st->cap = c;
	st->nfront = 0;
	atomic_fetch_add(&gc_captures, 1);
	pthread_mutex_unlock(&gmu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) { return begin_capture(hStream, mode); }

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) { return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL); }

/* mark_ancestors marks nd and everything it depends on with gen. */
static void mark_ancestors(CUgraphNode nd, uint64_t gen)
{
	if (nd->mark == gen)
		return;
	nd->mark = gen;
	for (size_t i = 0; i < nd->ndeps; i++)
		mark_ancestors(nd->deps[i], gen);
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	if (phGraph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	if (is_special(hStream))
		return CUDA_ERROR_ILLEGAL_STATE;
	pthread_mutex_lock(&gmu);
	struct strm *st = stream_find(GC_H(hStream));
	struct capture *c = st != NULL ? st->cap : NULL;
	if (c == NULL) {
		pthread_mutex_unlock(&gmu);
		return st == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_ILLEGAL_STATE;
	}
	if (c->origin != st) {
		/* Only the stream that began the capture ends it; the attempt
		 * ruins it. */
		c->invalid = 1;
		pthread_mutex_unlock(&gmu);
		return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	}
	if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
		pthread_mutex_unlock(&gmu);
		return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
	}
	/* Every stream that joined must have been joined back: its last
	 * work must be something the origin's next work depends on. */
	uint64_t gen = ++walk_gen;
	for (size_t i = 0; i < st->nfront; i++)
		mark_ancestors(st->front[i], gen);
	int unjoined = 0;
	for (size_t i = 0; i < nstreams && !unjoined; i++) {
		struct strm *o = streams[i];
		if (o->cap != c || o == st)
			continue;
		for (size_t j = 0; j < o->nfront; j++)
			if (o->front[j]->mark != gen)
				unjoined = 1;
	}
	CUgraph g = c->g;
	if (unjoined)
		r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
	else if (c->invalid)
		r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	capture_end(c);
	pthread_mutex_unlock(&gmu);
	if (r != CUDA_SUCCESS) {
		graph_free(g);
		*phGraph = NULL;
		return r;
	}
	*phGraph = g;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	if (captureStatus == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	*captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
	if (!gc_capture_active())
		return CUDA_SUCCESS;
	pthread_mutex_lock(&gmu);
	if (hStream == NULL || hStream == CU_STREAM_LEGACY) {
		uint64_t ctx;
		if (gc_current_ctx(&ctx) == CUDA_SUCCESS && implicit(ctx))
			r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	} else {
		struct strm *st = capturing(hStream);
		if (st != NULL)
			*captureStatus = st->cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
	}
	pthread_mutex_unlock(&gmu);
	return r;
}

/* capture_info answers the cuStreamGetCaptureInfo family. The dependency
 * array points into the stream's record and stays valid until the next
 * call on the stream, as CUDA promises. Edge data is all default, which
 * CUDA reports as NULL. */
static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	if (status == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	*status = CU_STREAM_CAPTURE_STATUS_NONE;
	if (edges != NULL)
		*edges = NULL;
	if (!gc_capture_active())
		return CUDA_SUCCESS;
	pthread_mutex_lock(&gmu);
	uint64_t ctx;
	struct strm *st = capturing(s);
	if (st == NULL && (s == NULL || s == CU_STREAM_LEGACY) && gc_current_ctx(&ctx) == CUDA_SUCCESS && implicit(ctx))
		r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	if (st != NULL) {
		struct capture *c = st->cap;
		*status = c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
		if (id != NULL)
			*id = c->id;
		if (graph != NULL)
			*graph = c->g;
		if (deps != NULL)
			*deps = st->front;
		if (ndeps != NULL)
			*ndeps = st->nfront;
	}
	pthread_mutex_unlock(&gmu);
	return r;
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
	return capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
					   CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
	return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
					   CUgraph *graph_out, const CUgraphNode **dependencies_out,
					   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out, numDependencies_out);
}

static int edges_default(const CUgraphEdgeData *e, size_t n)
{
	static const CUgraphEdgeData zero;
	for (size_t i = 0; e != NULL && i < n; i++)
		if (memcmp(&e[i], &zero, sizeof zero) != 0)
			return 0;
	return 1;
}

static CUresult update_deps(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, unsigned int flags)
{
	if ((n > 0 && deps == NULL) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
		return CUDA_ERROR_INVALID_VALUE;
	if (!edges_default(edges, n))
		return CUDA_ERROR_NOT_SUPPORTED; /* programmatic edges are not recorded */
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gmu);
	struct strm *st = capturing(s);
	if (st == NULL)
		r = CUDA_ERROR_ILLEGAL_STATE;
	for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
		if (deps[i] == NULL || deps[i]->g != st->cap->g)
			r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS) {
		int bad = flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES ? set_front(st, deps, n) : add_front(st, deps, n);
		if (bad < 0)
			r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&gmu);
	return r;
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies, size_t numDependencies,
						   unsigned int flags)
{
	return update_deps(hStream, dependencies, NULL, numDependencies, flags);
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
						      const CUgraphEdgeData *dependencyData, size_t numDependencies,
						      unsigned int flags)
{
	return update_deps(hStream, dependencies, dependencyData, numDependencies, flags);
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (mode == NULL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = thread_mode;
	thread_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* ---- graph calls ---------------------------------------------------------------- */

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	if (phGraph == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUgraph g = calloc(1, sizeof *g);
	if (g == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phGraph = g;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
	if (hGraph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gmu);
	for (size_t i = 0; i < ncaps; i++)
		if (caps[i]->g == hGraph) {
			pthread_mutex_unlock(&gmu);
			return CUDA_ERROR_ILLEGAL_STATE; /* still being captured into */
		}
	pthread_mutex_unlock(&gmu);
	graph_free(hGraph);
	return CUDA_SUCCESS;
}

/* fill_nodes implements CUDA's convention for node lists: with no array,
 * report the count; else fill up to *n entries, NULL the rest, and report
 * how many were filled. */
static void fill_nodes(CUgraphNode *out, size_t *n, CUgraphNode const *src, size_t have)
{
	if (out == NULL) {
		*n = have;
		return;
	}
	size_t k = have < *n ? have : *n;
	for (size_t i = 0; i < *n; i++)
		out[i] = i < k ? src[i] : NULL;
	*n = k;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
	if (hGraph == NULL || numNodes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gmu);
	fill_nodes(nodes, numNodes, hGraph->nodes, hGraph->n);
	pthread_mutex_unlock(&gmu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
	if (hGraph == NULL || numRootNodes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gmu);
	CUgraphNode *roots = malloc((hGraph->n ? hGraph->n : 1) * sizeof *roots);
	size_t k = 0;
	for (size_t i = 0; roots != NULL && i < hGraph->n; i++)
		if (hGraph->nodes[i]->ndeps == 0)
			roots[k++] = hGraph->nodes[i];
	if (roots != NULL)
		fill_nodes(rootNodes, numRootNodes, roots, k);
	pthread_mutex_unlock(&gmu);
	free(roots);
	return roots != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult get_edges(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges, size_t *num)
{
	if (g == NULL || num == NULL || (from == NULL) != (to == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gmu);
	size_t k = 0;
	for (size_t i = 0; i < g->n; i++)
		for (size_t j = 0; j < g->nodes[i]->ndeps; j++) {
			if (from != NULL && k < *num) {
				from[k] = g->nodes[i]->deps[j];
				to[k] = g->nodes[i];
				if (edges != NULL)
					memset(&edges[k], 0, sizeof edges[k]);
			}
			k++;
		}
	if (from != NULL) {
		for (size_t i = k; i < *num; i++)
			from[i] = to[i] = NULL;
		if (k > *num)
			k = *num;
	}
	*num = k;
	pthread_mutex_unlock(&gmu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
	return get_edges(hGraph, from, to, NULL, numEdges);
}

CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
				    size_t *numEdges)
{
	return get_edges(hGraph, from, to, edgeData, numEdges);
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
	if (hNode == NULL || type == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*type = hNode->type;
	return CUDA_SUCCESS;
}

static CUresult node_deps(CUgraphNode nd, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *num)
{
	if (nd == NULL || num == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gmu);
	size_t want = *num;
	fill_nodes(deps, num, nd->deps, nd->ndeps);
	if (deps != NULL && edges != NULL)
		memset(edges, 0, want * sizeof *edges);
	pthread_mutex_unlock(&gmu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies)
{
	return node_deps(hNode, dependencies, NULL, numDependencies);
}

CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies, CUgraphEdgeData *edgeData,
					       size_t *numDependencies)
{
	return node_deps(hNode, dependencies, edgeData, numDependencies);
}

static CUresult add_deps(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *edges, size_t n)
{
	if (g == NULL || (n > 0 && (from == NULL || to == NULL)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!edges_default(edges, n))
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&gmu);
	for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
		if (from[i] == NULL || to[i] == NULL || from[i]->g != g || to[i]->g != g || from[i] == to[i])
			r = CUDA_ERROR_INVALID_VALUE;
		else if (!has_dep(to[i], from[i]) && push_ptr((void ***)&to[i]->deps, &to[i]->ndeps, &to[i]->capdeps, from[i]) < 0)
			r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&gmu);
	return r;
}

CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to, size_t numDependencies)
{
	return add_deps(hGraph, from, to, NULL, numDependencies);
}

CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
					   const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	return add_deps(hGraph, from, to, edgeData, numDependencies);
}

/* add_node is the common part of the cuGraphAdd*Node calls. */
static CUresult add_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType type,
			 CUcontext ctx, CUgraphNode *nd)
{
	if (out == NULL || g == NULL || (ndeps > 0 && deps == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t c = GC_H(ctx);
	CUresult r;
	if (c == 0 && (r = gc_current_ctx(&c)) != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gmu);
	r = node_new(g, type, deps, ndeps, c, nd);
	pthread_mutex_unlock(&gmu);
	if (r == CUDA_SUCCESS)
		*out = *nd;
	return r;
}

/* drop_last removes a node just added when its parameters are refused. */
static void drop_last(CUgraph g, CUgraphNode nd)
{
	pthread_mutex_lock(&gmu);
	if (g->n > 0 && g->nodes[g->n - 1] == nd)
		g->n--;
	pthread_mutex_unlock(&gmu);
	node_free(nd);
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				     size_t numDependencies)
{
	CUgraphNode nd;
	return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY, NULL, &nd);
}

/* kernel_fn picks the function of kernel node parameters: func, or a
 * CUkernel given in its place (CUDA accepts one wherever a function is). */
static CUfunction kernel_fn(CUfunction f, CUkernel k) { return f != NULL ? f : (CUfunction)(void *)k; }

/* node_fn resolves what kernel node parameters name (a function, or a
 * CUkernel in place of one) to the function in the node's context,
 * loading the kernel's library there on first use, before the
 * parameters are packed by its layout. Called without gmu: resolving may
 * load a module. */
static CUresult node_fn(CUfunction f, uint64_t ctx, CUfunction *out)
{
	if (f == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUfunc_st *fn;
	CUresult r = gc_func_resolve(f, ctx, &fn);
	if (r == CUDA_SUCCESS)
		*out = fn;
	return r;
}

static CUresult add_kernel(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUfunction f,
			   const unsigned int grid[3], const unsigned int block[3], unsigned int shared, void **kp,
			   void **extra, CUcontext ctx)
{
	if (f == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUgraphNode nd;
	CUresult r = add_node(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_KERNEL, ctx, &nd);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = node_fn(f, nd->ctx, &f)) != CUDA_SUCCESS || (r = set_kernel(nd, f, grid, block, shared, kp, extra)) != CUDA_SUCCESS) {
		drop_last(g, nd);
		*out = NULL;
	}
	return r;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ }, block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
	return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, kernel_fn(p->func, p->kern), grid, block,
			  p->sharedMemBytes, p->kernelParams, p->extra, p->ctx);
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ }, block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
	return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, p->func, grid, block, p->sharedMemBytes,
			  p->kernelParams, p->extra, NULL);
}

static CUresult kernel_get(CUgraphNode nd, CUDA_KERNEL_NODE_PARAMS *p, int v2)
{
	if (nd == NULL || p == NULL || nd->type != CU_GRAPH_NODE_TYPE_KERNEL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS q = {
		.func = nd->f,
		.gridDimX = nd->grid[0], .gridDimY = nd->grid[1], .gridDimZ = nd->grid[2],
		.blockDimX = nd->block[0], .blockDimY = nd->block[1], .blockDimZ = nd->block[2],
		.sharedMemBytes = nd->shared,
		.kernelParams = nd->kparams,
		.extra = NULL,
		.kern = NULL,
		.ctx = (CUcontext)(uintptr_t)nd->ctx,
	};
	if (v2)
		*p = q;
	else
		memcpy(p, &q, sizeof(CUDA_KERNEL_NODE_PARAMS_v1));
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	return kernel_get(hNode, nodeParams, 1);
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	return kernel_get(hNode, (CUDA_KERNEL_NODE_PARAMS *)(void *)nodeParams, 0);
}

static CUresult kernel_set(CUgraphNode nd, CUfunction f, const unsigned int grid[3], const unsigned int block[3],
			   unsigned int shared, void **kp, void **extra)
{
	if (nd == NULL || nd->type != CU_GRAPH_NODE_TYPE_KERNEL || f == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = node_fn(f, nd->ctx, &f);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gmu);
	r = set_kernel(nd, f, grid, block, shared, kp, extra);
	pthread_mutex_unlock(&gmu);
	return r;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ }, block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
	return kernel_set(hNode, kernel_fn(p->func, p->kern), grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
}

CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ }, block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
	return kernel_set(hNode, p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	if (memsetParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int es = memsetParams->elementSize;
	if ((es != 1 && es != 2 && es != 4) || memsetParams->height == 0 ||
	    (memsetParams->height > 1 && memsetParams->pitch < memsetParams->width * es))
		return CUDA_ERROR_INVALID_VALUE;
	CUgraphNode nd;
	CUresult r = add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMSET, ctx, &nd);
	if (r == CUDA_SUCCESS)
		nd->ms = *memsetParams;
	return r;
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	if (copyParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (copyParams->srcMemoryType == CU_MEMORYTYPE_ARRAY || copyParams->dstMemoryType == CU_MEMORYTYPE_ARRAY)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUgraphNode nd;
	CUresult r = add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMCPY, ctx, &nd);
	if (r == CUDA_SUCCESS)
		nd->copy = *copyParams;
	return r;
}

/* ---- executable graphs ------------------------------------------------------------ */

/* packed_extra describes a node's packed parameters as a launch's extra
 * array; NULL when the kernel takes none. */
static void **packed_extra(CUgraphNode nd, void *extra[5])
{
	if (nd->nparams == 0)
		return NULL;
	extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
	extra[1] = nd->params;
	extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
	extra[3] = &nd->nparams;
	extra[4] = CU_LAUNCH_PARAM_END;
	return extra;
}

static CUgraphNode node_copy(CUgraphNode src)
{
	CUgraphNode nd = malloc(sizeof *nd);
	if (nd == NULL)
		return NULL;
	*nd = *src;
	nd->deps = NULL;
	nd->ndeps = nd->capdeps = 0;
	nd->params = NULL;
	nd->kparams = NULL;
	nd->orig = src;
	void *extra[5];
	if (src->type == CU_GRAPH_NODE_TYPE_KERNEL &&
	    set_kernel(nd, src->f, src->grid, src->block, src->shared, NULL, packed_extra(src, extra)) != CUDA_SUCCESS) {
		free(nd);
		return NULL;
	}
	return nd;
}

static void exec_free(CUgraphExec x)
{
	for (size_t i = 0; i < x->n; i++)
		node_free(x->nodes[i]);
	free(x->nodes);
	free(x);
}

/* instantiate orders g's nodes so that every node follows its
 * dependencies (Kahn's algorithm) and copies them: an executable graph
 * does not change when its graph does. gmu held. */
static CUresult instantiate(CUgraph g, CUgraphExec *out, CUgraphNode *err_node, CUgraphInstantiateResult *res)
{
	size_t n = g->n, edges = 0;
	for (size_t i = 0; i < n; i++) {
		g->nodes[i]->idx = i;
		edges += g->nodes[i]->ndeps;
	}
	/* Dependents of each node, as one array split by first[]. */
	size_t *indeg = calloc(n + 1, sizeof *indeg), *first = calloc(n + 2, sizeof *first);
	size_t *succ = malloc((edges ? edges : 1) * sizeof *succ);
	CUgraphNode *order = malloc((n ? n : 1) * sizeof *order);
	CUgraphExec x = calloc(1, sizeof *x);
	if (indeg == NULL || first == NULL || succ == NULL || order == NULL || x == NULL) {
		free(indeg);
		free(first);
		free(succ);
		free(order);
		free(x);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < g->nodes[i]->ndeps; j++)
			first[g->nodes[i]->deps[j]->idx + 2]++;
	for (size_t i = 0; i < n; i++)
		first[i + 2] += first[i + 1];
	for (size_t i = 0; i < n; i++) {
		indeg[i] = g->nodes[i]->ndeps;
		for (size_t j = 0; j < g->nodes[i]->ndeps; j++)
			succ[first[g->nodes[i]->deps[j]->idx + 1]++] = i;
	}
	/* first[k] now starts node k's dependents, first[k+1] ends them. */
	size_t head = 0, tail = 0;
	for (size_t i = 0; i < n; i++)
		if (indeg[i] == 0)
			order[tail++] = g->nodes[i];
	while (head < tail) {
		size_t done = order[head++]->idx;
		for (size_t e = first[done]; e < first[done + 1]; e++)
			if (--indeg[succ[e]] == 0)
				order[tail++] = g->nodes[succ[e]];
	}
	free(indeg);
	free(first);
	free(succ);
	if (tail != n) {
		free(order);
		free(x);
		if (res != NULL)
			*res = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
		if (err_node != NULL)
			*err_node = NULL;
		return CUDA_ERROR_INVALID_VALUE; /* a cycle */
	}
	x->nodes = order;
	for (size_t i = 0; i < n; i++) {
		if ((order[i] = node_copy(order[i])) == NULL) {
			x->n = i;
			exec_free(x);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	x->n = n;
	if (res != NULL)
		*res = CUDA_GRAPH_INSTANTIATE_SUCCESS;
	*out = x;
	return CUDA_SUCCESS;
}

static CUresult instantiate_call(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags, CUgraphNode *err_node,
				 CUgraphInstantiateResult *res)
{
	if (phGraphExec == NULL || hGraph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	/* Device launch has no meaning here; the other flags do not change
	 * what a launch computes. */
	if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
					  CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gmu);
	r = instantiate(hGraph, phGraphExec, err_node, res);
	pthread_mutex_unlock(&gmu);
	return r;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	return instantiate_call(phGraphExec, hGraph, flags, NULL, NULL);
}

/* The CUDA 10/11 form, with an error node and a log buffer. */
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
				    size_t bufferSize)
{
	if (logBuffer != NULL && bufferSize > 0)
		logBuffer[0] = 0;
	return instantiate_call(phGraphExec, hGraph, 0, phErrorNode, NULL);
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
				       size_t bufferSize)
{
	return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
	p->hErrNode_out = NULL;
	return instantiate_call(phGraphExec, hGraph, p->flags, &p->hErrNode_out, &p->result_out);
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
						   const CUDA_KERNEL_NODE_PARAMS *p)
{
	if (hGraphExec == NULL || hNode == NULL || p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < hGraphExec->n; i++) {
		CUgraphNode nd = hGraphExec->nodes[i];
		if (nd->orig != hNode)
			continue;
		/* The function may change only within its context, and a
		 * node's type never. */
		CUfunction f = kernel_fn(p->func, p->kern);
		unsigned int grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ }, block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
		return kernel_set(nd, f, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS q;
	memset(&q, 0, sizeof q);
	memcpy(&q, p, sizeof *p);
	return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &q);
}

/* submit sends one node's work on stream s of ctx (or records it, when s
 * is itself capturing: a graph launched into a capture). */
static CUresult submit(CUgraphNode nd, uint64_t ctx, CUstream s)
{
	CUresult r = CUDA_SUCCESS;
	switch (nd->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		void *extra[5];
		if (gc_capture_active() && gc_cap_launch(nd->f, nd->grid, nd->block, nd->shared, nd->cluster, nd->lflags, s, NULL,
							 packed_extra(nd, extra), &r))
			return r;
		return gc_launch_packed(ctx, nd->f, nd->grid, nd->block, nd->shared, nd->cluster, nd->lflags, s, nd->params,
					nd->nparams);
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (gc_capture_active() && gc_cap_copy(&nd->copy, s, &r))
			return r;
		return gc_copy3d(ctx, &nd->copy, s, 1);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		for (size_t y = 0; y < nd->ms.height && r == CUDA_SUCCESS; y++) {
			CUdeviceptr row = nd->ms.dst + y * nd->ms.pitch;
			if (gc_capture_active() && gc_cap_memset(row, nd->ms.value, nd->ms.elementSize, nd->ms.width, s, &r))
				continue;
			r = gc_rpc_Memset_async(ctx, row, nd->ms.value, (int32_t)nd->ms.elementSize, nd->ms.width, GC_S(s));
		}
		return r;
	case CU_GRAPH_NODE_TYPE_HOST:
		return cuLaunchHostFunc(s, nd->fn, nd->user);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return cuEventRecordWithFlags(nd->ev, s, CU_EVENT_RECORD_EXTERNAL);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return cuStreamWaitEvent(s, nd->ev, CU_EVENT_WAIT_EXTERNAL);
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		if (gc_capture_active() && gc_cap_memop(s, nd->wait, nd->addr, nd->value, nd->flags, nd->width, &r))
			return r;
		if (nd->wait)
			return gc_rpc_StreamWaitValue_async(ctx, GC_S(s), nd->addr, nd->value, nd->flags, (uint32_t)nd->width);
		return gc_rpc_StreamWriteValue_async(ctx, GC_S(s), nd->addr, nd->value, nd->flags, (uint32_t)nd->width);
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	if (hGraphExec == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	for (size_t i = 0; r == CUDA_SUCCESS && i < hGraphExec->n; i++)
		r = submit(hGraphExec->nodes[i], ctx, hStream);
	return r;
}

/* Uploading prepares nothing: a launch sends the work as it goes. */
CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	(void)hStream;
	if (hGraphExec == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return gc_ready();
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	if (hGraphExec == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	exec_free(hGraphExec);
	return CUDA_SUCCESS;
}
