// Chunks of device memory mapped by the worker; see vmm.h.
#include "vmm.h"

#include <string.h>

enum {
	ALLOC_PINNED = 1,          // CU_MEM_ALLOCATION_TYPE_PINNED
	LOC_DEVICE = 1,            // CU_MEM_LOCATION_TYPE_DEVICE
	ACCESS_RW = 3,             // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	VMM_NOT_SUPPORTED = 801,   // CUDA_ERROR_NOT_SUPPORTED
	HANDLE_POSIX_FD = 1,       // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
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

static void device_prop(CUmemAllocationProp *p, int dev, int exportable)
{
	memset(p, 0, sizeof *p);
	p->type = ALLOC_PINNED;
	p->location.type = LOC_DEVICE;
	p->location.id = dev;
	if (exportable)
		p->requestedHandleTypes = HANDLE_POSIX_FD;
}

static int have_export(const gc_ext *x)
{
	return have(x) && x->cuMemExportToShareableHandle && x->cuMemImportFromShareableHandle;
}

// enter makes c current for a call that needs virtual memory management
// (and, with need_export, shareable handles).
static CUresult enter(const gc_api *a, const gc_ext *x, CUcontext c, int need_export)
{
	if (need_export ? !have_export(x) : !have(x))
		return VMM_NOT_SUPPORTED;
	return use_ctx(a, c);
}

// map_rw maps h at va and opens it read-write to dev; on failure it
// unmaps again but keeps h.
static CUresult map_rw(const gc_ext *x, CUdeviceptr va, size_t n, int dev, CUmemGenericAllocationHandle h)
{
	CUmemAccessDesc acc;
	CUresult r = x->cuMemMap(va, n, 0, h, 0);
	if (r != 0)
		return r;
	memset(&acc, 0, sizeof acc);
	acc.location.type = LOC_DEVICE;
	acc.location.id = dev;
	acc.flags = ACCESS_RW;
	r = x->cuMemSetAccess(va, n, &acc, 1);
	if (r != 0)
		x->cuMemUnmap(va, n);
	return r;
}

// reserve_at takes exactly va again where a reservation did not survive
// (a process restored by the driver).
static CUresult reserve_at(const gc_ext *x, CUdeviceptr va, size_t n)
{
	CUdeviceptr got = 0;
	CUresult r = x->cuMemAddressReserve(&got, n, 0, va, 0);
	if (r != 0)
		return r;
	if (got != va) {
		x->cuMemAddressFree(got, n);
		return OUT_OF_MEMORY_RESULT;
	}
	return 0;
}

// back_at creates physical memory and maps it read-write at va.
static CUresult back_at(const gc_ext *x, CUdeviceptr va, size_t n, int dev, int exportable,
		       CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop;
	CUresult r;
	device_prop(&prop, dev, exportable);
	r = x->cuMemCreate(h, n, &prop, 0);
	if (r != 0)
		return r;
	r = map_rw(x, va, n, dev, *h);
	if (r != 0)
		x->cuMemRelease(*h);
	return r;
}

CUresult gc_vmm_map(const gc_api *a, const gc_ext *x, CUcontext c, size_t n, int dev, int exportable,
		    CUdeviceptr *va, CUmemGenericAllocationHandle *h)
{
	CUresult r = enter(a, x, c, 0);
	if (r != 0)
		return r;
	r = x->cuMemAddressReserve(va, n, 0, 0, 0);
	if (r == INVALID_VALUE_RESULT)
		return OUT_OF_MEMORY_RESULT; // as cuMemAlloc says of a size no GPU has
	if (r != 0)
		return r;
	r = back_at(x, *va, n, dev, exportable, h);
	if (r != 0)
		x->cuMemAddressFree(*va, n);
	return r;
}

CUresult gc_vmm_free(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n,
		     CUmemGenericAllocationHandle h, int backed)
{
	CUresult r = 0, r2;
	r = enter(a, x, c, 0);
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
	CUresult r = enter(a, x, c, 0);
	if (r != 0)
		return r;
	r = x->cuMemUnmap(va, n);
	if (r != 0)
		return r;
	return x->cuMemRelease(h);
}

CUresult gc_vmm_back(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n, int dev,
		     int exportable, CUmemGenericAllocationHandle *h)
{
	CUresult r = enter(a, x, c, 0);
	if (r != 0)
		return r;
	r = back_at(x, va, n, dev, exportable, h);
	if (r == 0)
		return 0;
	// The reservation may be gone: take exactly va again, or give up.
	if (reserve_at(x, va, n) != 0)
		return r;
	return back_at(x, va, n, dev, exportable, h);
}

CUresult gc_vmm_export(const gc_api *a, const gc_ext *x, CUcontext c, CUmemGenericAllocationHandle h, int *fd)
{
	CUresult r = enter(a, x, c, 1);
	if (r != 0)
		return r;
	return x->cuMemExportToShareableHandle(fd, h, HANDLE_POSIX_FD, 0);
}

CUresult gc_vmm_import(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n, int dev, int fd,
		       CUmemGenericAllocationHandle *h)
{
	CUresult r = enter(a, x, c, 1);
	if (r != 0)
		return r;
	r = x->cuMemImportFromShareableHandle(h, (void *)(intptr_t)fd, HANDLE_POSIX_FD);
	if (r != 0)
		return r;
	r = map_rw(x, va, n, dev, *h);
	if (r != 0 && reserve_at(x, va, n) == 0)
		r = map_rw(x, va, n, dev, *h);
	if (r != 0)
		x->cuMemRelease(*h);
	return r;
}

CUresult gc_vmm_unreserve(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n)
{
	CUresult r = enter(a, x, c, 0);
	if (r != 0)
		return r;
	return x->cuMemAddressFree(va, n);
}

CUresult gc_vmm_granularity(const gc_ext *x, int dev, size_t *g)
{
	CUmemAllocationProp prop;
	if (!have(x))
		return VMM_NOT_SUPPORTED;
	device_prop(&prop, dev, 0);
	return x->cuMemGetAllocationGranularity(g, &prop, 0 /* CU_MEM_ALLOC_GRANULARITY_MINIMUM */);
}
