package spec

import "strings"

// Result is one CUresult: NVIDIA's number and enumerator name, and the
// text cuGetErrorString gives for it.
type Result struct {
	Code uint32
	Name string // the C enumerator, e.g. CUDA_ERROR_INVALID_VALUE
	// Text is what cuGetErrorString returns. It is empty for codes whose
	// driver text is not recorded here; the interposer then answers
	// cuGetErrorString with CUDA_ERROR_INVALID_VALUE, as for a code it
	// does not know, while cuGetErrorName still names the code.
	Text string
}

// Results is every CUresult of the driver API, in the order of the
// CUresult enum in the interposer's cuda.h (which a test holds to this
// table). From it the generator writes the Go constants and names of
// package cu and the interposer's cuGetErrorName and cuGetErrorString
// tables. The numbers are NVIDIA's and never change: applications compare
// against them.
var Results = []Result{
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	{5, "CUDA_ERROR_PROFILER_DISABLED", ""},
	{6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", ""},
	{7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", ""},
	{8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", ""},
	{34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", ""},
	{46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{102, "CUDA_ERROR_DEVICE_NOT_LICENSED", ""},
	{200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	{205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
	{206, "CUDA_ERROR_UNMAP_FAILED", ""},
	{207, "CUDA_ERROR_ARRAY_IS_MAPPED", ""},
	{208, "CUDA_ERROR_ALREADY_MAPPED", ""},
	{209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	{210, "CUDA_ERROR_ALREADY_ACQUIRED", ""},
	{211, "CUDA_ERROR_NOT_MAPPED", ""},
	{212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", ""},
	{213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", ""},
	{214, "CUDA_ERROR_ECC_UNCORRECTABLE", ""},
	{215, "CUDA_ERROR_UNSUPPORTED_LIMIT", ""},
	{216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", ""},
	{217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", ""},
	{218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", ""},
	{220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", ""},
	{221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", ""},
	{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"},
	{223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", ""},
	{224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the execution affinity is not supported"},
	{225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", ""},
	{226, "CUDA_ERROR_CONTAINED", ""},
	{300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
	{301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	{302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", ""},
	{303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", ""},
	{304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{402, "CUDA_ERROR_LOSSY_QUERY", ""},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	{702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	{703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", ""},
	{704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", ""},
	{705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", ""},
	{708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "the primary context for the device is already active"},
	{709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	{710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
	{711, "CUDA_ERROR_TOO_MANY_PEERS", ""},
	{712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
	{713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
	{714, "CUDA_ERROR_HARDWARE_STACK_ERROR", ""},
	{715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	{716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	{717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	{718, "CUDA_ERROR_INVALID_PC", "invalid program counter"},
	{719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", ""},
	{721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", ""},
	{800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	{803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", ""},
	{804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", ""},
	{805, "CUDA_ERROR_MPS_CONNECTION_FAILED", ""},
	{806, "CUDA_ERROR_MPS_RPC_FAILURE", ""},
	{807, "CUDA_ERROR_MPS_SERVER_NOT_READY", ""},
	{808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", ""},
	{809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", ""},
	{810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", ""},
	{811, "CUDA_ERROR_CDP_NOT_SUPPORTED", ""},
	{812, "CUDA_ERROR_CDP_VERSION_MISMATCH", ""},
	{900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", ""},
	{901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", ""},
	{902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", ""},
	{903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", ""},
	{904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", ""},
	{905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", ""},
	{906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", ""},
	{907, "CUDA_ERROR_CAPTURED_EVENT", ""},
	{908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", ""},
	{909, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
	{910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", ""},
	{911, "CUDA_ERROR_EXTERNAL_DEVICE", ""},
	{912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", ""},
	{913, "CUDA_ERROR_FUNCTION_NOT_LOADED", ""},
	{914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", ""},
	{915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", ""},
	{916, "CUDA_ERROR_KEY_ROTATION", ""},
	{999, "CUDA_ERROR_UNKNOWN", "unknown error"},
}

// GoName is the Go constant package cu declares for r: the enumerator
// without its CUDA_ prefix in mixed caps, keeping initialisms whole
// (CUDA_ERROR_NO_BINARY_FOR_GPU is ErrorNoBinaryForGPU).
func (r Result) GoName() string {
	var b strings.Builder
	for _, w := range strings.Split(strings.TrimPrefix(r.Name, "CUDA_"), "_") {
		if s, ok := initialisms[w]; ok {
			b.WriteString(s)
			continue
		}
		b.WriteString(w[:1])
		b.WriteString(strings.ToLower(w[1:]))
	}
	return b.String()
}

// initialisms are the words of enumerator names that Go writes whole.
var initialisms = map[string]string{
	"CDP": "CDP", "ECC": "ECC", "GPU": "GPU", "JIT": "JIT", "MPS": "MPS",
	"NVLINK": "NVLink", "PC": "PC", "PTX": "PTX", "RPC": "RPC",
}
