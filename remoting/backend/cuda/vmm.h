// Device memory that the worker maps itself (virtual memory management)
// for cuMemAlloc, so that it can save it, release the physical memory and
// back the same addresses again; and the calls that save and reload it.
#ifndef GPUCTL_CUDA_VMM_H
#define GPUCTL_CUDA_VMM_H

#include "ext.h"

// gc_vmm_map reserves n bytes of device addresses, backs them with new
// physical memory of GPU dev, maps it there and opens it read-write to
// dev. exportable asks for memory that gc_vmm_export can hand out. On
// failure nothing is left behind.
CUresult gc_vmm_map(const gc_api *a, const gc_ext *x, CUcontext c, size_t n, int dev, int exportable,
		    CUdeviceptr *va, CUmemGenericAllocationHandle *h);

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
		     int exportable, CUmemGenericAllocationHandle *h);

// gc_vmm_export hands a chunk's physical memory out as a file descriptor
// (of its own: the memory lives while the descriptor or a handle does).
CUresult gc_vmm_export(const gc_api *a, const gc_ext *x, CUcontext c, CUmemGenericAllocationHandle h, int *fd);

// gc_vmm_import maps memory that gc_vmm_export handed out at va again,
// reserving exactly va first where the reservation did not survive. The
// descriptor stays the caller's.
CUresult gc_vmm_import(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n, int dev, int fd,
		       CUmemGenericAllocationHandle *h);

// gc_vmm_unreserve frees addresses with nothing mapped.
CUresult gc_vmm_unreserve(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr va, size_t n);


// gc_vmm_granularity is the minimum mapping granularity of GPU dev.
CUresult gc_vmm_granularity(const gc_ext *x, int dev, size_t *g);

#endif
