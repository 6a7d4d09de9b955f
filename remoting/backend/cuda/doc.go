// Package cuda is the device backend for real NVIDIA GPUs, plus the
// driver's checkpoint API and GPU discovery that gpud uses around it.
//
// # Loading
//
// libcuda.so.1 is opened with dlopen at run time and every entry point is
// resolved by its versioned name (cuMemAlloc_v2, cuCtxCreate_v2, ...), so
// gpud builds, tests and runs on hosts without CUDA. The C declarations in
// api.h are ABI copies of the few cuda.h types used; no NVIDIA header is
// needed to build. gpuctl's own client library is refused if a stray
// LD_LIBRARY_PATH puts it in the driver's place.
//
// # GPU visibility
//
// A worker process enumerates every GPU of its host: the driver's restore
// accepts a GPU map only as a full permutation of the GPUs the process
// enumerated, so a worker that saw one GPU could never be restored on
// another. gpud gives each session one GPU (Options.Device, by UUID or
// ordinal), and the Device shows the client only that GPU, as device 0.
// After a restore onto another GPU the driver keeps reporting the old PCI
// bus ID to the process.
//
// # Calls
//
// All calls of a session run in order on the worker's call thread. Every
// C wrapper that needs a context takes it explicitly and makes it current
// only when it is not already, in the same cgo call, so a call can never
// run in the wrong context. Handles given to the client are small opaque
// numbers looked up in per-context tables, and device pointers are checked
// against the session's allocations: a forged handle or pointer gets
// CUDA_ERROR_INVALID_HANDLE or CUDA_ERROR_INVALID_VALUE, never a crash.
//
// Host copies stream through two pinned staging buffers per context: the
// socket fills one while the GPU empties the other. Kernel parameter
// layouts come from cuFuncGetParamInfo (CUDA 12.4+), and launches pass the
// client's packed buffer with CU_LAUNCH_PARAM_BUFFER_POINTER.
//
// # Pools, virtual memory and the rest of backend.Extended
//
// Memory pools, stream-ordered allocation, virtual memory management,
// stream memory operations, tensor maps and pitched copies go to the
// driver as they are (ext.c resolves them separately, so a driver without
// one fails only that call). Pools and physical allocations get handles of
// this package, like everything else. Stream-ordered allocations and
// mapped ranges belong to no context: they are kept in a device-wide table
// that every context's pointer checks consult, and a mapping must lie in a
// reservation this session made. The client's device 0 is translated to
// the session's GPU in every memory location. The driver's checkpoint
// keeps pool and mapped memory at the same addresses, like any other.
//
// # Checkpoints
//
// Checkpointer drives cuCheckpointProcess{Lock,Checkpoint,Restore,Unlock,
// GetState} on a worker's host PID from gpud. SuspendHook and RestoreHook
// adapt it to the checkpoint and restore pipelines; PlanRestore,
// PlanRemap and CheckCompatible decide, before anything is touched,
// whether and how an image can be restored on a host. Discover lists a
// host's GPUs through NVML.
package cuda
