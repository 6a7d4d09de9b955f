// Package spec is the single description of the CUDA driver API that
// gpuctl remotes. Two tables drive everything:
//
//   - Ops are the wire operations: their op code, the backend.Device method
//     that serves them, and the fields of their argument block and reply.
//     From them the generator writes the Go op codes (package wire), the
//     Go dispatch (package dispatch) and the C encoders/decoders and RPC
//     wrappers of the interposer, so the two sides cannot drift apart.
//   - Entries are the C entry points of libcuda.so.1: the symbols exported
//     (with the CUDA version that introduced each, for cuGetProcAddress),
//     whether the call is served by the server through an op, served
//     locally in the client, hand-written, or unsupported.
//
// Run `go generate ./remoting/...` after editing; the generated files are
// checked in and `make check-generated` fails when they are stale.
package spec

import "slices"

//go:generate go run ./gen -root ../..

// Wire field types. Every field is little endian; variable-length fields
// carry a u32 length first.
const (
	U32    = "u32"
	I32    = "i32"
	U64    = "u64"
	F32    = "f32"
	Bool   = "bool"   // u32 0 or 1
	Str    = "str"    // u32 length + bytes, no terminator
	UUID   = "uuid"   // 16 raw bytes
	Bytes  = "bytes"  // u32 length + bytes
	Params = "params" // u32 count + count × (u32 offset, u32 size)
)

// Field is one argument or result of an op.
type Field struct {
	Name string
	Wire string // one of the wire types above
	Go   string // the Go type the backend method uses (conversion target)
}

// Bulk says whether an op streams a payload after its argument block
// (In: client to server) or after its reply (Out).
type Bulk int

const (
	NoBulk Bulk = iota
	BulkIn
	BulkOut
)

// Op is one wire operation.
type Op struct {
	Code uint16
	Name string // Go constant suffix and, unless Custom, the backend method
	// Ctx: the first field on the wire is the backend.Ctx the call runs in
	// (the client's current context). Such ops report a pending error from
	// earlier asynchronous work of that context.
	Ctx bool
	In  []Field
	Out []Field
	// Async: the client may send this op with wire.FlagAsync.
	Async bool
	Bulk  Bulk
	// Custom: the dispatch calls the hand-written Session.do<Name> with the
	// decoded inputs instead of a backend method, because the op streams
	// bulk data or needs a structure built.
	Custom bool
	// Keeps: the op leaves the worker's host state as it was. It only
	// reads, waits, or writes device memory a checkpoint saves itself
	// (the session's allocations) or checks (its modules' variables), so
	// a checkpoint of a session that ran only such ops since its worker
	// was last dumped reuses that dump (docs/checkpoint.md, "Reusing the
	// process image"). An op not marked is taken to change the state.
	Keeps bool
	// Launches: the op runs kernels. It keeps the host state when the
	// backend can account for everything its kernels can write
	// (backend.UntrackedState).
	Launches bool
}

func f(name, wire, gotype string) Field { return Field{name, wire, gotype} }

var (
	dev    = f("dev", I32, "int32")
	ctxF   = f("c", U64, "backend.Ctx")
	mod    = f("m", U64, "backend.Module")
	fn     = f("fn", U64, "backend.Function")
	stream = f("s", U64, "backend.Stream")
	event  = f("e", U64, "backend.Event")
	ptr    = f("ptr", U64, "backend.DevPtr")
)

// Ops is the table of wire operations: the core ops below, the ops of the
// extended surface (entries_torch.go, codes 300-399) and those of what
// NVIDIA's libraries need besides (entries_libs.go, codes 400-499) and
// the session's own (entries_session.go, codes 500-599),
// joined here and nowhere else. Codes never change meaning; new ops take
// new codes.
var Ops = slices.Concat(coreOps, torchOps, libraryOps, sessionOps)

// coreOps are the ops of driver-API programs.
var coreOps = []Op{
	{Code: 1, Name: "DriverVersion", Keeps: true, Out: []Field{f("version", I32, "int32")}},
	{Code: 2, Name: "DeviceCount", Keeps: true, Out: []Field{f("count", I32, "int32")}},
	{Code: 3, Name: "DeviceName", Keeps: true, In: []Field{dev}, Out: []Field{f("name", Str, "string")}},
	{Code: 4, Name: "DeviceUUID", Keeps: true, In: []Field{dev}, Out: []Field{f("uuid", UUID, "[16]byte")}},
	{Code: 5, Name: "DeviceTotalMem", Keeps: true, In: []Field{dev}, Out: []Field{f("bytes", U64, "uint64")}},
	{Code: 6, Name: "DeviceAttribute", Keeps: true, In: []Field{f("attr", I32, "int32"), dev}, Out: []Field{f("value", I32, "int32")}},
	{Code: 7, Name: "DevicePCIBusID", Keeps: true, In: []Field{dev}, Out: []Field{f("busid", Str, "string")}},

	{Code: 16, Name: "PrimaryCtxRetain", In: []Field{dev}, Out: []Field{f("ctx", U64, "backend.Ctx")}},
	{Code: 17, Name: "PrimaryCtxRelease", In: []Field{dev}},
	{Code: 18, Name: "PrimaryCtxReset", In: []Field{dev}},
	{Code: 19, Name: "PrimaryCtxState", Keeps: true, In: []Field{dev}, Out: []Field{f("flags", U32, "uint32"), f("active", Bool, "bool")}},
	{Code: 20, Name: "PrimaryCtxSetFlags", In: []Field{dev, f("flags", U32, "uint32")}},
	{Code: 21, Name: "CtxCreate", In: []Field{dev, f("flags", U32, "uint32")}, Out: []Field{f("ctx", U64, "backend.Ctx")}},
	// CtxDestroy, CtxDevice and CtxSynchronize name their context as their
	// Ctx field; there is no second copy.
	{Code: 22, Name: "CtxDestroy", Ctx: true},
	{Code: 23, Name: "CtxDevice", Keeps: true, Ctx: true, Out: []Field{dev}},
	{Code: 24, Name: "CtxSynchronize", Keeps: true, Ctx: true},

	{Code: 32, Name: "MemAlloc", Ctx: true, In: []Field{f("size", U64, "uint64")}, Out: []Field{ptr}},
	{Code: 33, Name: "MemFree", Ctx: true, In: []Field{ptr}},
	{Code: 34, Name: "MemGetInfo", Keeps: true, Ctx: true, Out: []Field{f("free", U64, "uint64"), f("total", U64, "uint64")}},
	{Code: 35, Name: "MemGetAddressRange", Keeps: true, Ctx: true, In: []Field{ptr}, Out: []Field{f("base", U64, "backend.DevPtr"), f("size", U64, "uint64")}},
	{Code: 36, Name: "MemcpyHtoD", Keeps: true, Ctx: true, Async: true, Bulk: BulkIn, Custom: true,
		In: []Field{f("dst", U64, "backend.DevPtr"), f("n", U64, "uint64"), stream}},
	{Code: 37, Name: "MemcpyDtoH", Keeps: true, Ctx: true, Bulk: BulkOut, Custom: true,
		In: []Field{f("src", U64, "backend.DevPtr"), f("n", U64, "uint64"), stream}},
	{Code: 38, Name: "MemcpyDtoD", Keeps: true, Ctx: true, Async: true,
		In: []Field{f("dst", U64, "backend.DevPtr"), f("src", U64, "backend.DevPtr"), f("n", U64, "uint64"), stream}},
	{Code: 39, Name: "Memset", Keeps: true, Ctx: true, Async: true,
		In: []Field{f("dst", U64, "backend.DevPtr"), f("value", U32, "uint32"), f("elemSize", I32, "int"), f("count", U64, "uint64"), stream}},

	{Code: 48, Name: "ModuleLoad", Ctx: true, Bulk: BulkIn, Custom: true, Out: []Field{mod}},
	{Code: 49, Name: "ModuleUnload", Ctx: true, In: []Field{mod}},
	{Code: 50, Name: "ModuleGetFunction", Ctx: true, In: []Field{mod, f("name", Str, "string")},
		Out: []Field{fn, f("params", Params, "[]backend.Param")}},
	{Code: 51, Name: "ModuleGetGlobal", Ctx: true, In: []Field{mod, f("name", Str, "string")},
		Out: []Field{ptr, f("size", U64, "uint64")}},
	{Code: 52, Name: "FuncGetAttribute", Ctx: true, In: []Field{fn, f("attr", I32, "int32")}, Out: []Field{f("value", I32, "int32")}},
	{Code: 53, Name: "FuncSetAttribute", Ctx: true, In: []Field{fn, f("attr", I32, "int32"), f("value", I32, "int32")}},

	{Code: 64, Name: "Launch", Launches: true, Ctx: true, Async: true, Custom: true, In: []Field{
		fn,
		f("gx", U32, "uint32"), f("gy", U32, "uint32"), f("gz", U32, "uint32"),
		f("bx", U32, "uint32"), f("by", U32, "uint32"), f("bz", U32, "uint32"),
		f("shared", U32, "uint32"), stream, f("params", Bytes, "[]byte"),
	}},

	{Code: 80, Name: "StreamCreate", Ctx: true, In: []Field{f("flags", U32, "uint32"), f("priority", I32, "int32")}, Out: []Field{stream}},
	{Code: 81, Name: "StreamDestroy", Ctx: true, In: []Field{stream}},
	{Code: 82, Name: "StreamQuery", Keeps: true, Ctx: true, In: []Field{stream}},
	{Code: 83, Name: "StreamSynchronize", Keeps: true, Ctx: true, In: []Field{stream}},
	{Code: 84, Name: "StreamWaitEvent", Keeps: true, Ctx: true, Async: true, In: []Field{stream, event, f("flags", U32, "uint32")}},

	{Code: 96, Name: "EventCreate", Ctx: true, In: []Field{f("flags", U32, "uint32")}, Out: []Field{event}},
	{Code: 97, Name: "EventDestroy", Ctx: true, In: []Field{event}},
	{Code: 98, Name: "EventRecord", Ctx: true, Async: true, In: []Field{event, stream}},
	{Code: 99, Name: "EventQuery", Keeps: true, Ctx: true, In: []Field{event}},
	{Code: 100, Name: "EventSynchronize", Keeps: true, Ctx: true, In: []Field{event}},
	{Code: 101, Name: "EventElapsedTime", Keeps: true, Ctx: true, In: []Field{f("start", U64, "backend.Event"), f("end", U64, "backend.Event")},
		Out: []Field{f("ms", F32, "float32")}},
}
