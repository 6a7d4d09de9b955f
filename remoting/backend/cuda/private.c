// The driver's answers behind backend.TPCLayouts and backend.StreamIDs
// (private.go): a private export table of NVIDIA's driver and
// cuStreamGetId, both resolved when first used.
#define _GNU_SOURCE
#include "api.h"

#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "private.h"

enum { NOT_SUPPORTED = 801, UNKNOWN = 999, TPC_MAX = 256 };

static CUresult use_ctx(const gc_api *a, CUcontext c)
{
	CUcontext cur = NULL;
	CUresult r = a->cuCtxGetCurrent(&cur);
	if (r != 0 || cur == c)
		return r;
	return a->cuCtxSetCurrent(c);
}

// Table 1734dc26-800d-4745-8726-c0f1e7dd8bca (docs/export-tables.md):
// slot 4 hands out two buffers it allocated with malloc, one byte per TPC
// (the TPC's GPC, its index in the GPC); slot 13 frees them.
static const unsigned char tpc_table_uuid[16] = { 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
						  0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca };

CUresult gc_tpc_layout(const gc_api *a, CUcontext c, unsigned char *gpc, unsigned char *local, unsigned int *n)
{
	typedef CUresult (*get_table_fn)(const void **, const CUuuid *);
	typedef CUresult (*layout_fn)(void **, void **);
	typedef CUresult (*release_fn)(void *, void *);
	get_table_fn get = (get_table_fn)dlsym(a->lib, "cuGetExportTable");
	*n = 0;
	if (get == NULL)
		return NOT_SUPPORTED;
	const void **t = NULL;
	CUuuid id;
	memcpy(id.bytes, tpc_table_uuid, 16);
	CUresult r = get((const void **)&t, &id);
	if (r != 0)
		return r;
	// Word 0 is the table's size in bytes; slots 4 and 13 must be in it.
	if (t == NULL || (size_t)t[0] < 14 * sizeof(void *))
		return NOT_SUPPORTED;
	if ((r = use_ctx(a, c)) != 0)
		return r;
	void *g = NULL, *l = NULL;
	if ((r = ((layout_fn)t[4])(&g, &l)) != 0)
		return r;
	// The driver copies its TPC count of bytes into buffers of exactly
	// that size and does not say the count; what malloc made usable is
	// at least that, and no more than the 256 bytes the driver keeps
	// per array. Bytes past the count are what a caller of the driver
	// would read past it too.
	size_t k = malloc_usable_size(g);
	if (malloc_usable_size(l) < k)
		k = malloc_usable_size(l);
	if (k > TPC_MAX)
		k = TPC_MAX;
	memcpy(gpc, g, k);
	memcpy(local, l, k);
	((release_fn)t[13])(g, l);
	*n = (unsigned int)k;
	return 0;
}

CUresult gc_stream_get_id(const gc_api *a, CUcontext c, CUstream s, unsigned long long *id)
{
	typedef CUresult (*fn)(CUstream, unsigned long long *);
	fn f = (fn)dlsym(a->lib, "cuStreamGetId");
	if (f == NULL)
		return NOT_SUPPORTED;
	CUresult r = use_ctx(a, c);
	if (r != 0)
		return r;
	return f(s, id);
}
