// Device memory that the worker maps itself (virtual memory management)
// for cuMemAlloc, so that it can save it, release the physical memory and
// back the same addresses again; and the calls that save and reload it.
#ifndef GPUCTL_CUDA_VMM_H
#define GPUCTL_CUDA_VMM_H

#include "ext.h"

// gc_vmm_map reserves n bytes of device addresses, backs them with new
// physical memory of GPU dev, maps it there and opens it read-write to
// dev. On failure nothing is left behind.
CUresult gc_vmm_map(const gc_api *a, const gc_ext *x, CUcontext c, size_t n, int dev, CUdeviceptr *va,
		    CUmemGenericAllocationHandle *h);

// gc_vmm_free unmaps and releases a chunk's memory (when backed) and
// frees its addresses.
CUresult gc_vmm_free(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n,
		     CUmemGenericAllocationHandle h, int backed);

// gc_vmm_unback unmaps and releases a chunk's physical memory, keeping its
// addresses reserved.
CUresult gc_vmm_unback(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n,
		       CUmemGenericAllocationHandle h);

// gc_vmm_back backs a chunk's addresses with new physical memory again.
// Where the reservation did not survive (a process restored by the
// driver), it reserves exactly va again first.
CUresult gc_vmm_back(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n, int dev,
		     CUmemGenericAllocationHandle *h);

// gc_vmm_granularity is the minimum mapping granularity of GPU dev.
CUresult gc_vmm_granularity(const gc_ext *x, int dev, size_t *g);

#endif
