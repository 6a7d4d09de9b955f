// Chunks of device memory mapped by the worker; see vmm.h.
#include "vmm.h"

#include <string.h>

enum {
	ALLOC_PINNED = 1,          // CU_MEM_ALLOCATION_TYPE_PINNED
	LOC_DEVICE = 1,            // CU_MEM_LOCATION_TYPE_DEVICE
	ACCESS_RW = 3,             // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	VMM_NOT_SUPPORTED = 801,   // CUDA_ERROR_NOT_SUPPORTED
	INVALID_VALUE_RESULT = 1,  // CUDA_ERROR_INVALID_VALUE
	OUT_OF_MEMORY_RESULT = 2,  // CUDA_ERROR_OUT_OF_MEMORY
};

static CUresult use_ctx(const gc_api *a, CUcontext c)
{
	CUcontext cur = NULL;
	CUresult r = a->cuCtxGetCurrent(&cur);
	if (r != 0 || cur == c)
		return r;
	return a->cuCtxSetCurrent(c);
}

static int have(const gc_ext *x)
{
	return x->cuMemAddressReserve && x->cuMemAddressFree && x->cuMemCreate && x->cuMemRelease &&
	       x->cuMemMap && x->cuMemUnmap && x->cuMemSetAccess && x->cuMemGetAllocationGranularity;
}

static void device_prop(CUmemAllocationProp *p, int dev)
{
	memset(p, 0, sizeof *p);
	p->type = ALLOC_PINNED;
	p->location.type = LOC_DEVICE;
	p->location.id = dev;
}

// back_at creates physical memory and maps it read-write at va.
static CUresult back_at(const gc_ext *x, CUdeviceptr va, size_t n, int dev, CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	CUresult r;
	device_prop(&prop, dev);
	r = x->cuMemCreate(h, n, &prop, 0);
	if (r != 0)
		return r;
	r = x->cuMemMap(va, n, 0, *h, 0);
	if (r != 0) {
		x->cuMemRelease(*h);
		return r;
	}
	memset(&acc, 0, sizeof acc);
	acc.location.type = LOC_DEVICE;
	acc.location.id = dev;
	acc.flags = ACCESS_RW;
	r = x->cuMemSetAccess(va, n, &acc, 1);
	if (r != 0) {
		x->cuMemUnmap(va, n);
		x->cuMemRelease(*h);
	}
	return r;
}

CUresult gc_vmm_map(const gc_api *a, const gc_ext *x, CUcontext c, size_t n, int dev, CUdeviceptr *va,
		    CUmemGenericAllocationHandle *h)
{
	CUresult r;
	if (!have(x))
		return VMM_NOT_SUPPORTED;
	r = use_ctx(a, c);
	if (r != 0)
		return r;
	r = x->cuMemAddressReserve(va, n, 0, 0, 0);
	if (r == INVALID_VALUE_RESULT)
		return OUT_OF_MEMORY_RESULT; // as cuMemAlloc says of a size no GPU has
	if (r != 0)
		return r;
	r = back_at(x, *va, n, dev, h);
	if (r != 0)
		x->cuMemAddressFree(*va, n);
	return r;
}

CUresult gc_vmm_free(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n,
		     CUmemGenericAllocationHandle h, int backed)
{
	CUresult r = 0, r2;
	if (!have(x))
		return VMM_NOT_SUPPORTED;
	r = use_ctx(a, c);
	if (r != 0)
		return r;
	if (backed)
		r = gc_vmm_unback(a, x, c, va, n, h);
	r2 = x->cuMemAddressFree(va, n);
	return r != 0 ? r : r2;
}

CUresult gc_vmm_unback(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n,
		       CUmemGenericAllocationHandle h)
{
	CUresult r;
	if (!have(x))
		return VMM_NOT_SUPPORTED;
	r = use_ctx(a, c);
	if (r != 0)
		return r;
	r = x->cuMemUnmap(va, n);
	if (r != 0)
		return r;
	return x->cuMemRelease(h);
}

CUresult gc_vmm_back(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n, int dev,
		     CUmemGenericAllocationHandle *h)
{
	CUdeviceptr got = 0;
	CUresult r;
	if (!have(x))
		return VMM_NOT_SUPPORTED;
	r = use_ctx(a, c);
	if (r != 0)
		return r;
	r = back_at(x, va, n, dev, h);
	if (r == 0)
		return 0;
	// The reservation may be gone: take exactly va again, or give up.
	if (x->cuMemAddressReserve(&got, n, 0, va, 0) != 0)
		return r;
	if (got != va) {
		x->cuMemAddressFree(got, n);
		return r;
	}
	return back_at(x, va, n, dev, h);
}

CUresult gc_vmm_granularity(const gc_ext *x, int dev, size_t *g)
{
	CUmemAllocationProp prop;
	if (!have(x))
		return VMM_NOT_SUPPORTED;
	device_prop(&prop, dev);
	return x->cuMemGetAllocationGranularity(g, &prop, 0 /* CU_MEM_ALLOC_GRANULARITY_MINIMUM */);
}
