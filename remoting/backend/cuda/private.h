#ifndef GC_CUDA_PRIVATE_H
#define GC_CUDA_PRIVATE_H
#include "api.h"

// gc_tpc_layout fills gpc and local (256 bytes each) and sets *n.
CUresult gc_tpc_layout(const gc_api *a, CUcontext c, unsigned char *gpc, unsigned char *local, unsigned int *n);
CUresult gc_stream_get_id(const gc_api *a, CUcontext c, CUstream s, unsigned long long *id);
#endif
