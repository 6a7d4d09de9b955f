package emulated

import "github.com/gpuctl/gpuctl/remoting/cu"

// CUdevice_attribute values the emulated device answers with something
// other than zero. Values are NVIDIA's; names drop the CU_DEVICE_ATTRIBUTE_
// prefix.
const (
	attrMaxThreadsPerBlock         = 1
	attrMaxBlockDimX               = 2
	attrMaxBlockDimY               = 3
	attrMaxBlockDimZ               = 4
	attrMaxGridDimX                = 5
	attrMaxGridDimY                = 6
	attrMaxGridDimZ                = 7
	attrMaxSharedMemoryPerBlock    = 8
	attrTotalConstantMemory        = 9
	attrWarpSize                   = 10
	attrMaxPitch                   = 11
	attrMaxRegistersPerBlock       = 12
	attrClockRate                  = 13
	attrTextureAlignment           = 14
	attrMultiprocessorCount        = 16
	attrSurfaceAlignment           = 30
	attrMemoryClockRate            = 36
	attrGlobalMemoryBusWidth       = 37
	attrMaxThreadsPerMultiproc     = 39
	attrUnifiedAddressing          = 41
	attrTexturePitchAlignment      = 51
	attrComputeCapabilityMajor     = 75
	attrComputeCapabilityMinor     = 76
	attrGlobalL1CacheSupported     = 79
	attrLocalL1CacheSupported      = 80
	attrMaxSharedMemoryPerMultipro = 81
	attrMaxRegistersPerMultiproc   = 82
	attrSingleToDoublePerfRatio    = 87
	attrMaxSharedMemPerBlockOptin  = 97
	attrHostRegisterSupported      = 99
	attrMaxBlocksPerMultiproc      = 106
	attrReservedSharedMemPerBlock  = 111

	// Stream memory operations, virtual memory management and memory
	// pools, which the device implements (memops.go, vmm.go, pools.go).
	attrCanUseStreamMemOps   = 92
	attrCanUse64BitMemOps    = 93
	attrCanUseWaitValueNOR   = 94
	attrVirtualMemoryMgmt    = 102
	attrMemoryPoolsSupported = 115

	// attrMax is CU_DEVICE_ATTRIBUTE_MAX in CUDA 13's header: values at or
	// above it are not attributes at all.
	attrMax = 136
)

// Limits the emulated device enforces at launch; the attributes report the
// same numbers.
const (
	maxThreadsPerBlock   = 1024
	maxBlockDimZ         = 64
	maxGridDimX          = 1<<31 - 1
	maxGridDimYZ         = 65535
	sharedPerBlock       = 48 << 10
	sharedPerBlockOptin  = 99 << 10
	reservedSharedPerBlk = 1 << 10
	maxClusterSize       = 16 // blocks per cluster with non-portable sizes allowed (CUDA 12, sm_90)
	warpSize             = 32
)

// attribute answers cuDeviceGetAttribute. The values describe what the
// emulator actually does: it executes sm_90 PTX with the limits below, has
// no texture or surface units, no mapped or managed memory and runs one
// kernel at a time, so those features report zero.
func (d *Device) attribute(attr int32) (int32, error) {
	switch attr {
	case attrMaxThreadsPerBlock, attrMaxBlockDimX, attrMaxBlockDimY:
		return maxThreadsPerBlock, nil
	case attrMaxBlockDimZ:
		return maxBlockDimZ, nil
	case attrMaxGridDimX:
		return maxGridDimX, nil
	case attrMaxGridDimY, attrMaxGridDimZ:
		return maxGridDimYZ, nil
	case attrMaxSharedMemoryPerBlock:
		return sharedPerBlock, nil
	case attrTotalConstantMemory:
		return 64 << 10, nil
	case attrWarpSize:
		return warpSize, nil
	case attrMaxPitch:
		return 1<<31 - 1, nil
	case attrMaxRegistersPerBlock, attrMaxRegistersPerMultiproc:
		return 64 << 10, nil
	case attrClockRate:
		return 1_000_000, nil // kHz; the interpreter has no real clock
	case attrTextureAlignment, attrSurfaceAlignment:
		return 512, nil
	case attrTexturePitchAlignment:
		return 32, nil
	case attrMultiprocessorCount:
		return int32(d.cfg.Cores), nil
	case attrMemoryClockRate:
		return 1_000_000, nil
	case attrGlobalMemoryBusWidth:
		return 64, nil
	case attrMaxThreadsPerMultiproc:
		return 2048, nil
	case attrUnifiedAddressing:
		return 1, nil
	case attrComputeCapabilityMajor:
		return 9, nil
	case attrComputeCapabilityMinor:
		return 0, nil
	case attrGlobalL1CacheSupported, attrLocalL1CacheSupported:
		return 1, nil
	case attrMaxSharedMemoryPerMultipro:
		return 228 << 10, nil
	case attrSingleToDoublePerfRatio:
		return 2, nil
	case attrMaxSharedMemPerBlockOptin:
		return sharedPerBlockOptin, nil
	case attrHostRegisterSupported:
		return 1, nil
	case attrMaxBlocksPerMultiproc:
		return 32, nil
	case attrReservedSharedMemPerBlock:
		return reservedSharedPerBlk, nil
	case attrCanUseStreamMemOps, attrCanUse64BitMemOps, attrCanUseWaitValueNOR, attrVirtualMemoryMgmt, attrMemoryPoolsSupported:
		return 1, nil
	}
	if attr < 1 || attr >= attrMax {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "device attribute %d does not exist", attr)
	}
	return 0, nil
}
