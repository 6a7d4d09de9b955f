package kernels

import (
	"fmt"
	"math"
	"strconv"
	"unsafe"
)

// references maps each kernel of src/*.cu to its CPU reference. Each one is
// written from the kernel's documented behaviour, element by element, in the
// same order of floating-point operations where the result depends on it.
var references = map[string]refFunc{
	// basic.cu
	"empty":        func(*Case, Mem) {},
	"vecadd":       refVecadd,
	"scale_offset": refScaleOffset,
	"saxpy":        refSaxpy,
	"saxpy_iter":   refSaxpyIter,
	// reduce.cu
	"reduce_sum_shared": refReduceSum,
	"reduce_warp_shfl":  refReduceSum,
	"reduce_sum_dyn":    refReduceSumDyn,
	"reduce_lastblock":  refReduceLastblock,
	"block_sync_votes":  refBlockSyncVotes,
	// scan.cu
	"scan_inclusive_block":    refScanInclusiveBlock,
	"scan_exclusive_blelloch": refScanExclusiveBlelloch,
	"scan_warp_inclusive":     refScanWarpInclusive,
	// matmul.cu
	"matmul_tiled": refMatmulF32,
	"matmul_dyn":   refMatmulF32,
	"matmul_f64":   refMatmulF64,
	// atomics.cu
	"hist_shared_atomic": refHistShared,
	"hist_u64":           refHistU64,
	"atomic_float_add":   refAtomicFloatAdd,
	"atomic_minmax_bits": refAtomicMinmaxBits,
	"atomic_cas_exch":    refAtomicCasExch,
	// warp.cu, warp_match.cu
	"warp_vote":           refWarpVote,
	"warp_shfl_modes":     refWarpShflModes,
	"warp_reduce_xor_f32": refWarpReduceXor,
	"warp_match":          refWarpMatch,
	// stencil.cu
	"stencil1d": refStencil1D,
	"stencil2d": refStencil2D,
	// sort.cu
	"bitonic_sort_u32":     refBitonicU32,
	"bitonic_sort_f32_dyn": refBitonicF32,
	// devfunc.cu
	"devfunc_calls": refDevfuncCalls,
	// intops.cu
	"int_bitops": refIntBitops,
	"int64_math": refInt64Math,
	"divrem32":   refDivrem32,
	// floatmath.cu, fastmath.cu
	"float_math":  refFloatMath,
	"double_math": refDoubleMath,
	"fast_math":   refFastMath,
	// convert.cu, half.cu
	"convert_f2i":  refConvertF2I,
	"convert_i2f":  refConvertI2F,
	"convert_half": refConvertHalf,
	// memory.cu
	"vec_load":    refVecLoad,
	"use_globals": refUseGlobals,
	"local_array": refLocalArray,
	// select.cu
	"select_pred":    refSelectPred,
	"divergent_loop": refDivergentLoop,
	// special.cu, barriers.cu
	"special_regs":  refSpecialRegs,
	"named_barrier": refNamedBarrier,
	// narrow.cu, params.cu
	"narrow_types": refNarrowTypes,
	"bytes_v4":     refBytesV4,
	"struct_param": refStructParam,
	"mixed_params": refMixedParams,
	"many_params":  refManyParams,
	"bounded":      refBounded,
	// stateful.cu
	"state_init":     refStateInit,
	"state_step":     refStateStep,
	"state_checksum": refStateChecksum,
}

// globalInitializers are the initial values the sources give their module
// globals, by module and name, as little-endian bytes. A case reads one
// back with "global NAME TYPE COUNT keep".
var globalInitializers = map[string]map[string][]byte{
	"reduce": {
		"g_blocks_done": le[uint32](0),
	},
	"memory": {
		"c_table":   le[int32](3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3),
		"c_scale":   le[float32](0.5, 2.0),
		"c_offset":  le[int32](0),
		"g_counter": le[int32](1000),
		"g_lut":     le[uint32](2, 3, 5, 7, 11, 13, 17, 19),
		"g_bias":    le[float32](0.25),
		"g_sum64":   le[uint64](0x100000000),
	},
	"stencil": {
		"c_weights": le[float32](0.0625, 0.125, 0.1875, 0.25, 0.1875, 0.125, 0.0625),
	},
	"devfunc": {
		"c_poly": le[float32](1.0, -0.5, 0.25, -0.125, 0.0625),
	},
}

// le encodes values little-endian.
func le[T Elem](v ...T) []byte {
	m := Mem{"v": make([]byte, len(v)*sizeOf[T]())}
	Put(m, "v", v)
	return m["v"]
}

func sizeOf[T Elem]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// n returns scalar "n" as an int.
func n(c *Case) int { return int(c.Int("n")) }

func f32bits(f float32) uint32 { return math.Float32bits(f) }

// moduleGlobal returns global name: its value in m when the case declares it,
// else the module's initializer.
func moduleGlobal[T Elem](c *Case, m Mem, name string) []T {
	if _, ok := m[name]; ok {
		return Get[T](m, name)
	}
	init, ok := globalInitializers[c.Module][name]
	if !ok {
		panic(fmt.Sprintf("module %s has no known global %q", c.Module, name))
	}
	return Get[T](Mem{name: init}, name)
}

// putIfDeclared stores a global's new value when the case declares it.
func putIfDeclared[T Elem](m Mem, name string, v []T) {
	if _, ok := m[name]; ok {
		Put(m, name, v)
	}
}

func itoa(k int) string { return strconv.Itoa(k) }
