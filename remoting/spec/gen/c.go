package main

import (
	"bytes"
	"fmt"
	"log"
	"slices"
	"sort"
	"strings"

	"github.com/gpuctl/gpuctl/remoting/spec"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

const cdir = "remoting/interposer/gen/"

// cOutputs returns the interposer's generated files.
func cOutputs() map[string][]byte {
	return map[string][]byte{
		cdir + "gc_ops.h":         cOpsHeader(),
		cdir + "gc_rpc.c":         cRPC(),
		cdir + "gc_entries.c":     cEntries(),
		cdir + "gc_unsupported.c": cUnsupported(),
		cdir + "gc_procaddr.c":    cProcAddr(),
		cdir + "libcuda.map":      cVersionScript(),
		cdir + "gc_undef.h":       cUndef(),
		cdir + "gc_results.h":     cResults(),
	}
}

func opByName(name string) spec.Op {
	for _, op := range spec.Ops {
		if op.Name == name {
			return op
		}
	}
	log.Fatalf("entry refers to unknown op %q", name)
	return spec.Op{}
}

// C parameter declarations of an op's inputs.
func cInParams(op spec.Op) []string {
	var ps []string
	if op.Ctx {
		ps = append(ps, "uint64_t ctx")
	}
	for _, f := range op.In {
		switch f.Wire {
		case spec.U32:
			ps = append(ps, "uint32_t "+f.Name)
		case spec.I32:
			ps = append(ps, "int32_t "+f.Name)
		case spec.U64:
			ps = append(ps, "uint64_t "+f.Name)
		case spec.F32:
			ps = append(ps, "float "+f.Name)
		case spec.Bool:
			ps = append(ps, "int "+f.Name)
		case spec.Str:
			ps = append(ps, "const char *"+f.Name)
		case spec.Bytes:
			ps = append(ps, "const void *"+f.Name, "uint32_t "+f.Name+"_len")
		default:
			log.Fatalf("op %s: input %s has wire type %s", op.Name, f.Name, f.Wire)
		}
	}
	switch op.Bulk {
	case spec.BulkIn:
		ps = append(ps, "const void *bulk", "uint64_t bulk_len")
	case spec.BulkOut:
		ps = append(ps, "void *bulk", "uint64_t bulk_len")
	}
	return ps
}

func cOutParams(op spec.Op) []string {
	var ps []string
	for _, f := range op.Out {
		switch f.Wire {
		case spec.U32:
			ps = append(ps, "uint32_t *"+f.Name)
		case spec.I32:
			ps = append(ps, "int32_t *"+f.Name)
		case spec.U64:
			ps = append(ps, "uint64_t *"+f.Name)
		case spec.F32:
			ps = append(ps, "float *"+f.Name)
		case spec.Bool:
			ps = append(ps, "int *"+f.Name)
		case spec.Str:
			ps = append(ps, "char *"+f.Name, "size_t "+f.Name+"_cap")
		case spec.UUID:
			ps = append(ps, "uint8_t *"+f.Name)
		case spec.Params:
			ps = append(ps, "uint32_t *"+f.Name+"_count", "uint32_t *"+f.Name+"_pairs", "uint32_t "+f.Name+"_cap")
		case spec.Bytes:
			ps = append(ps, "void *"+f.Name, "uint32_t "+f.Name+"_cap", "uint32_t *"+f.Name+"_len")
		default:
			log.Fatalf("op %s: output %s has wire type %s", op.Name, f.Name, f.Wire)
		}
	}
	return ps
}

func fixedSize(wt string) int {
	switch wt {
	case spec.U32, spec.I32, spec.F32, spec.Bool:
		return 4
	case spec.U64:
		return 8
	case spec.UUID:
		return 16
	}
	return -1
}

func rpcProto(op spec.Op, async bool) string {
	ps := cInParams(op)
	name := "gc_rpc_" + op.Name
	if async {
		name += "_async"
	} else {
		ps = append(ps, cOutParams(op)...)
	}
	if len(ps) == 0 {
		ps = []string{"void"}
	}
	return fmt.Sprintf("CUresult %s(%s)", name, strings.Join(ps, ", "))
}

func cOpsHeader() []byte {
	var w bytes.Buffer
	header(&w, "//")
	w.WriteString("#ifndef GPUCTL_GC_OPS_H\n#define GPUCTL_GC_OPS_H\n\n#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n#include \"cuda.h\"\n\n")
	w.WriteString("/* Protocol constants, from package wire. */\n")
	fmt.Fprintf(&w, "#define GC_PROTO_VERSION %d\n", wire.Version)
	fmt.Fprintf(&w, "#define GC_HELLO_MAGIC \"%s\"\n#define GC_WELCOME_MAGIC \"%s\"\n", wire.HelloMagic[:], wire.WelcomeMagic[:])
	fmt.Fprintf(&w, "#define GC_HELLO_SIZE %d\n#define GC_WELCOME_SIZE %d\n", wire.HelloSize, wire.WelcomeSize)
	fmt.Fprintf(&w, "#define GC_HELLO_RESUME %d\n#define GC_HELLO_KEEPALIVE %d\n", wire.HelloResume, wire.HelloKeepalive)
	fmt.Fprintf(&w, "#define GC_REQ_HDR_SIZE %d\n#define GC_REP_HDR_SIZE %d\n", wire.RequestHeaderSize, wire.ReplyHeaderSize)
	fmt.Fprintf(&w, "#define GC_FLAG_ASYNC %d\n#define GC_FLAG_ACK_REQUEST %d\n", wire.FlagAsync, wire.FlagAckRequest)
	fmt.Fprintf(&w, "#define GC_KIND_REPLY %d\n#define GC_KIND_ACK %d\n#define GC_KIND_MOVED %d\n#define GC_KIND_CLOSING %d\n#define GC_KIND_KEEPALIVE %d\n",
		wire.KindReply, wire.KindAck, wire.KindMoved, wire.KindClosing, wire.KindKeepalive)
	for _, st := range []wire.Status{wire.StatusOK, wire.StatusBadToken, wire.StatusUnknownSession, wire.StatusVersionMismatch, wire.StatusRefused, wire.StatusMoved, wire.StatusTLSRequired, wire.StatusPreempted} {
		fmt.Fprintf(&w, "#define GC_STATUS_%s %d\n", strings.ToUpper(strings.ReplaceAll(st.String(), " ", "_")), st)
	}
	fmt.Fprintf(&w, "#define GC_MAX_TOKEN %d\n#define GC_MAX_SESSION_ID %d\n#define GC_MAX_SECRET %d\n#define GC_MAX_MESSAGE %d\n",
		wire.MaxTokenLen, wire.MaxSessionIDLen, wire.MaxSecretLen, wire.MaxMessageLen)
	fmt.Fprintf(&w, "#define GC_FLAG_DEFERRED %d\n#define GC_FEATURE_DEFERRED_REPLIES %d\n", wire.FlagDeferred, wire.FeatureDeferredReplies)
	fmt.Fprintf(&w, "#define GC_FEATURE_GOODBYE %d\n", wire.FeatureGoodbye)
	fmt.Fprintf(&w, "#define GC_MAX_ATTRS %d\n", wire.MaxAttrsLen)
	fmt.Fprintf(&w, "#define GC_MIN_MAX_FRAME %d\n#define GC_MAX_IMAGE %d\n\n", wire.MinMaxFrame, wire.MaxImage)

	w.WriteString("/* Wire op codes. */\nenum gc_op {\n")
	for _, op := range spec.Ops {
		fmt.Fprintf(&w, "\tGC_OP_%s = %d,\n", op.Name, op.Code)
	}
	w.WriteString("};\n\n/* gc_op_name names an op for diagnostics and statistics. */\nstatic inline const char *gc_op_name(unsigned op)\n{\n\tswitch (op) {\n")
	for _, op := range spec.Ops {
		fmt.Fprintf(&w, "\tcase GC_OP_%s:\n\t\treturn \"%s\";\n", op.Name, op.Name)
	}
	w.WriteString("\t}\n\treturn NULL;\n}\n\n#include \"../src/gc_wirefmt.h\"\n\n/* Argument block encoders: each writes an op's inputs at p and returns\n * the end. A bytes field with a NULL pointer only reserves its space. */\n")
	for _, op := range spec.Ops {
		writeEnc(&w, op)
	}
	w.WriteString("/* RPC wrappers (gc_rpc.c). Synchronous ones wait for the reply; _async\n * ones queue the request and return. */\n")
	for _, op := range spec.Ops {
		fmt.Fprintf(&w, "%s;\n", rpcProto(op, false))
		if op.Async {
			fmt.Fprintf(&w, "%s;\n", rpcProto(op, true))
		}
	}
	w.WriteString("\n#endif\n")
	return w.Bytes()
}

func encProto(op spec.Op) string {
	ps := []string{"uint8_t *p"}
	for _, p := range cInParams(op) {
		if strings.HasSuffix(p, "bulk") || strings.HasSuffix(p, " bulk_len") {
			continue
		}
		ps = append(ps, p)
	}
	return fmt.Sprintf("static inline uint8_t *gc_enc_%s(%s)", op.Name, strings.Join(ps, ", "))
}

func encArgs(op spec.Op) []string {
	as := []string{"args"}
	if op.Ctx {
		as = append(as, "ctx")
	}
	for _, f := range op.In {
		as = append(as, f.Name)
		if f.Wire == spec.Bytes {
			as = append(as, f.Name+"_len")
		}
	}
	return as
}

func writeEnc(w *bytes.Buffer, op spec.Op) {
	fmt.Fprintf(w, "%s\n{\n", encProto(op))
	if op.Ctx {
		w.WriteString("\tp = gc_put_u64(p, ctx);\n")
	}
	for _, f := range op.In {
		switch f.Wire {
		case spec.U32:
			fmt.Fprintf(w, "\tp = gc_put_u32(p, %s);\n", f.Name)
		case spec.I32:
			fmt.Fprintf(w, "\tp = gc_put_u32(p, (uint32_t)%s);\n", f.Name)
		case spec.U64:
			fmt.Fprintf(w, "\tp = gc_put_u64(p, %s);\n", f.Name)
		case spec.F32:
			fmt.Fprintf(w, "\tp = gc_put_f32(p, %s);\n", f.Name)
		case spec.Bool:
			fmt.Fprintf(w, "\tp = gc_put_u32(p, %s != 0);\n", f.Name)
		case spec.Str:
			fmt.Fprintf(w, "\tp = gc_put_bytes(p, %s, strlen(%s));\n", f.Name, f.Name)
		case spec.Bytes:
			fmt.Fprintf(w, "\tp = gc_put_bytes(p, %s, %s_len);\n", f.Name, f.Name)
		}
	}
	w.WriteString("\treturn p;\n}\n\n")
}

func cRPC() []byte {
	var w bytes.Buffer
	header(&w, "//")
	w.WriteString("#include <stdlib.h>\n#include <string.h>\n#include \"gc_ops.h\"\n#include \"../src/gc_core.h\"\n\n")
	for _, op := range spec.Ops {
		writeRPC(&w, op, false)
		if op.Async {
			writeRPC(&w, op, true)
		}
	}
	return w.Bytes()
}

func writeRPC(w *bytes.Buffer, op spec.Op, async bool) {
	fmt.Fprintf(w, "%s\n{\n", rpcProto(op, async))
	fixed := 0
	var vars []string
	if op.Ctx {
		fixed += 8
	}
	for _, f := range op.In {
		if n := fixedSize(f.Wire); n > 0 {
			fixed += n
			continue
		}
		fixed += 4
		switch f.Wire {
		case spec.Str:
			vars = append(vars, "strlen("+f.Name+")")
		case spec.Bytes:
			vars = append(vars, f.Name+"_len")
		}
	}
	lenExpr := fmt.Sprint(fixed)
	for _, v := range vars {
		lenExpr += " + " + v
	}
	// The reply buffer is allocated before a ring slot is taken, so that
	// a failed allocation leaves nothing half-queued.
	ofixed := 0
	var ovars []string
	for _, f := range op.Out {
		if n := fixedSize(f.Wire); n > 0 {
			ofixed += n
			continue
		}
		ofixed += 4
		switch f.Wire {
		case spec.Str:
			ovars = append(ovars, "256")
		case spec.Params:
			ovars = append(ovars, "8 * (size_t)"+f.Name+"_cap")
		case spec.Bytes:
			ovars = append(ovars, "(size_t)"+f.Name+"_cap")
		}
	}
	if !async {
		if len(ovars) == 0 {
			fmt.Fprintf(w, "\tuint8_t out[%d];\n\tsize_t ocap = %d;\n", max(ofixed, 1), ofixed)
		} else {
			fmt.Fprintf(w, "\tsize_t ocap = %d + %s;\n\tuint8_t *out = malloc(ocap);\n", ofixed, strings.Join(ovars, " + "))
			w.WriteString("\tif (out == NULL)\n\t\treturn CUDA_ERROR_OUT_OF_MEMORY;\n")
		}
	}
	flags := "0"
	if async {
		flags = "GC_FLAG_ASYNC"
	}
	bulk := "NULL, 0"
	if op.Bulk == spec.BulkIn {
		bulk = "bulk, bulk_len"
	}
	fmt.Fprintf(w, "\tstruct gc_call k;\n\tuint8_t *args = gc_begin(&k, GC_OP_%s, %s, %s, %s);\n", op.Name, lenExpr, flags, bulk)
	w.WriteString("\tif (args == NULL) {\n")
	if !async && len(ovars) > 0 {
		w.WriteString("\t\tfree(out);\n")
	}
	w.WriteString("\t\treturn k.res;\n\t}\n")
	fmt.Fprintf(w, "\tgc_enc_%s(%s);\n", op.Name, strings.Join(encArgs(op), ", "))
	if async {
		w.WriteString("\treturn gc_async(&k);\n}\n\n")
		return
	}
	bulkOut := "NULL, 0"
	if op.Bulk == spec.BulkOut {
		bulkOut = "bulk, bulk_len"
	}
	fmt.Fprintf(w, "\tCUresult r = gc_sync(&k, out, ocap, %s);\n", bulkOut)
	if len(op.Out) > 0 {
		w.WriteString("\tif (r == CUDA_SUCCESS) {\n\t\tstruct gc_rd d = { out, k.out_len, 0, 0 };\n")
		for _, f := range op.Out {
			switch f.Wire {
			case spec.U32:
				fmt.Fprintf(w, "\t\t*%s = gc_get_u32(&d);\n", f.Name)
			case spec.I32:
				fmt.Fprintf(w, "\t\t*%s = (int32_t)gc_get_u32(&d);\n", f.Name)
			case spec.U64:
				fmt.Fprintf(w, "\t\t*%s = gc_get_u64(&d);\n", f.Name)
			case spec.F32:
				fmt.Fprintf(w, "\t\t*%s = gc_get_f32(&d);\n", f.Name)
			case spec.Bool:
				fmt.Fprintf(w, "\t\t*%s = gc_get_u32(&d) != 0;\n", f.Name)
			case spec.Str:
				fmt.Fprintf(w, "\t\tgc_get_str(&d, %s, %s_cap);\n", f.Name, f.Name)
			case spec.UUID:
				fmt.Fprintf(w, "\t\tgc_get_raw(&d, %s, 16);\n", f.Name)
			case spec.Params:
				fmt.Fprintf(w, "\t\tgc_get_params(&d, %s_count, %s_pairs, %s_cap);\n", f.Name, f.Name, f.Name)
			case spec.Bytes:
				fmt.Fprintf(w, "\t\tgc_get_bytes(&d, %s, %s_cap, %s_len);\n", f.Name, f.Name, f.Name)
			}
		}
		fmt.Fprintf(w, "\t\tr = gc_rd_check(&d, \"%s\");\n\t}\n", op.Name)
	}
	if len(ovars) > 0 {
		w.WriteString("\tfree(out);\n")
	} else {
		w.WriteString("\t(void)out;\n")
	}
	w.WriteString("\treturn r;\n}\n\n")
}

func cEntries() []byte {
	var w bytes.Buffer
	header(&w, "//")
	w.WriteString("#include \"cuda.h\"\n#include \"gc_ops.h\"\n#include \"../src/gc_core.h\"\n#include \"gc_undef.h\"\n\n")
	for _, e := range spec.Entries {
		if e.Kind != spec.Remote {
			continue
		}
		op := opByName(e.Op)
		if len(e.Args) != len(op.In) || len(e.Outs) != len(op.Out) {
			log.Fatalf("entry %s: %d args/%d outs for op %s with %d inputs/%d outputs", e.Name, len(e.Args), len(e.Outs), op.Name, len(op.In), len(op.Out))
		}
		main := e.Symbols[len(e.Symbols)-1].Name
		fmt.Fprintf(&w, "CUresult CUDAAPI %s(%s)\n{\n\tCUresult r;\n", main, e.Proto)
		for _, o := range e.Outs {
			fmt.Fprintf(&w, "\tif (%s == NULL)\n\t\treturn CUDA_ERROR_INVALID_VALUE;\n", o)
		}
		var args []string
		if op.Ctx {
			w.WriteString("\tuint64_t ctx;\n\tif ((r = gc_current_ctx(&ctx)) != CUDA_SUCCESS)\n\t\treturn r;\n")
			args = append(args, "ctx")
		} else {
			w.WriteString("\tif ((r = gc_ready()) != CUDA_SUCCESS)\n\t\treturn r;\n")
		}
		for i, f := range op.In {
			switch f.Wire {
			case spec.U32:
				args = append(args, "(uint32_t)("+e.Args[i]+")")
			case spec.I32:
				args = append(args, "(int32_t)("+e.Args[i]+")")
			case spec.U64:
				args = append(args, "(uint64_t)("+e.Args[i]+")")
			default:
				log.Fatalf("entry %s: input %s of wire type %s needs a custom entry", e.Name, f.Name, f.Wire)
			}
		}
		for i, f := range op.Out {
			ct := map[string]string{spec.U32: "uint32_t", spec.I32: "int32_t", spec.U64: "uint64_t", spec.F32: "float", spec.Bool: "int"}[f.Wire]
			if ct == "" {
				log.Fatalf("entry %s: output %s of wire type %s needs a custom entry", e.Name, f.Name, f.Wire)
			}
			fmt.Fprintf(&w, "\t%s o%d;\n", ct, i)
			args = append(args, fmt.Sprintf("&o%d", i))
		}
		fmt.Fprintf(&w, "\tr = gc_rpc_%s(%s);\n", op.Name, strings.Join(args, ", "))
		if len(op.Out) > 0 {
			w.WriteString("\tif (r == CUDA_SUCCESS) {\n")
			for i, f := range op.Out {
				if f.Wire == spec.U64 {
					fmt.Fprintf(&w, "\t\t*%s = (__typeof__(*%s))(uintptr_t)o%d;\n", e.Outs[i], e.Outs[i], i)
				} else {
					fmt.Fprintf(&w, "\t\t*%s = (__typeof__(*%s))o%d;\n", e.Outs[i], e.Outs[i], i)
				}
			}
			w.WriteString("\t}\n")
		}
		w.WriteString("\treturn r;\n}\n")
		for _, s := range e.Symbols[:len(e.Symbols)-1] {
			fmt.Fprintf(&w, "CUresult CUDAAPI %s(%s) __attribute__((alias(\"%s\")));\n", s.Name, e.Proto, main)
		}
		w.WriteString("\n")
	}
	return w.Bytes()
}

func cUnsupported() []byte {
	var w bytes.Buffer
	header(&w, "//")
	w.WriteString("/* Entry points gpuctl does not serve. Each logs its name once and\n * returns CUDA_ERROR_NOT_SUPPORTED. cuda.h is not included: the stubs\n * take no arguments, which the C calling convention allows. */\n\n")
	w.WriteString("#include \"../src/gc_proc.h\"\n\n")
	for _, e := range spec.Entries {
		if e.Kind != spec.Unsupported {
			continue
		}
		for _, s := range e.Symbols {
			fmt.Fprintf(&w, "int %s(void)\n{\n\tstatic int once;\n\treturn gc_unsupported(\"%s\", &once);\n}\n\n", s.Name, s.Name)
		}
	}
	w.WriteString("/* Names cuGetProcAddress resolves without an exported symbol. */\n\n")
	for _, e := range spec.Entries {
		if e.Kind != spec.LookupOnly {
			continue
		}
		fmt.Fprintf(&w, "int %s(void)\n{\n\tstatic int once;\n\treturn gc_unsupported(\"%s\", &once);\n}\n\n", lookupStub(e.Name), e.Name)
	}
	return w.Bytes()
}

// lookupStub names the hidden stub of a lookup-only entry.
func lookupStub(name string) string { return "gc_lookup_" + name }

func allSymbols() []string {
	var names []string
	for _, e := range spec.Entries {
		if e.Kind == spec.LookupOnly {
			continue
		}
		for _, s := range e.Symbols {
			names = append(names, s.Name)
		}
	}
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			log.Fatalf("symbol %s exported twice", names[i])
		}
	}
	return names
}

func cProcAddr() []byte {
	var w bytes.Buffer
	header(&w, "//")
	w.WriteString("/* cuGetProcAddress's table: base name, the CUDA version from which a\n * symbol is handed out, whether it is the per-thread-default-stream form,\n * and the symbol. Sorted by name, then version. */\n\n")
	w.WriteString("#include <stddef.h>\n#include \"../src/gc_proc.h\"\n\n")
	for _, n := range allSymbols() {
		fmt.Fprintf(&w, "extern void %s(void);\n", n)
	}
	for _, e := range spec.Entries {
		if e.Kind == spec.LookupOnly {
			fmt.Fprintf(&w, "extern void %s(void);\n", lookupStub(e.Name))
		}
	}
	type row struct {
		base, sym string
		ver       int
		pt        bool
	}
	var rows []row
	for _, e := range spec.Entries {
		for _, s := range e.Symbols {
			base, fn := e.Name, s.Name
			switch e.Kind {
			case spec.Unsupported:
				base = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s.Name, "_v2"), "_v3"), "_v4")
			case spec.LookupOnly:
				fn = lookupStub(e.Name)
			}
			rows = append(rows, row{base, fn, s.Version, s.PerThread})
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		if c := strings.Compare(a.base, b.base); c != 0 {
			return c
		}
		return a.ver - b.ver
	})
	w.WriteString("\nconst struct gc_proc gc_procs[] = {\n")
	for _, r := range rows {
		pt := 0
		if r.pt {
			pt = 1
		}
		fmt.Fprintf(&w, "\t{ \"%s\", %d, %d, (void *)%s },\n", r.base, r.ver, pt, r.sym)
	}
	fmt.Fprintf(&w, "};\n\nconst size_t gc_nprocs = %d;\n", len(rows))
	return w.Bytes()
}

// cUndef lets the library define every exported symbol under its own
// name although cuda.h maps base names to versioned ones.
func cUndef() []byte {
	var w bytes.Buffer
	header(&w, "//")
	for _, n := range allSymbols() {
		fmt.Fprintf(&w, "#undef %s\n", n)
	}
	return w.Bytes()
}

func cVersionScript() []byte {
	var w bytes.Buffer
	header(&w, "#")
	w.WriteString("{\n  global:\n")
	for _, n := range allSymbols() {
		fmt.Fprintf(&w, "    %s;\n", n)
	}
	w.WriteString("  local:\n    *;\n};\n")
	return w.Bytes()
}
