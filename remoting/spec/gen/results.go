package main

import (
	"bytes"
	"fmt"

	"github.com/gpuctl/gpuctl/remoting/spec"
)

// resultsGo writes package cu's Result constants and their names.
func resultsGo() []byte {
	var w bytes.Buffer
	header(&w, "//")
	w.WriteString("package cu\n\n")
	w.WriteString("// The driver API's result codes (spec.Results).\nconst (\n")
	for _, r := range spec.Results {
		fmt.Fprintf(&w, "\t%s Result = %d\n", r.GoName(), r.Code)
	}
	w.WriteString(")\n\n// name is NVIDIA's enumerator for r, or \"\" for a code the driver API\n// does not define.\nfunc (r Result) name() string {\n\tswitch r {\n")
	for _, r := range spec.Results {
		fmt.Fprintf(&w, "\tcase %s:\n\t\treturn %q\n", r.GoName(), r.Name)
	}
	w.WriteString("\t}\n\treturn \"\"\n}\n")
	return w.Bytes()
}

// cResults writes the interposer's lookups behind cuGetErrorName and
// cuGetErrorString.
func cResults() []byte {
	var w bytes.Buffer
	header(&w, "//")
	w.WriteString("#ifndef GC_RESULTS_H\n#define GC_RESULTS_H\n\n#include <stddef.h>\n\n#include \"cuda.h\"\n\n")
	w.WriteString("/* gc_result_name is r's enumerator, NULL for a code the driver API does\n * not define. */\n")
	w.WriteString("static inline const char *gc_result_name(CUresult r)\n{\n\tswitch (r) {\n")
	for _, r := range spec.Results {
		fmt.Fprintf(&w, "\tcase %s:\n\t\treturn %q;\n", r.Name, r.Name)
	}
	w.WriteString("\t}\n\treturn NULL;\n}\n\n")
	w.WriteString("/* gc_result_text is what cuGetErrorString says for r, NULL where no\n * text is recorded. */\n")
	w.WriteString("static inline const char *gc_result_text(CUresult r)\n{\n\tswitch (r) {\n")
	for _, r := range spec.Results {
		if r.Text != "" {
			fmt.Fprintf(&w, "\tcase %s:\n\t\treturn %q;\n", r.Name, r.Text)
		}
	}
	w.WriteString("\tdefault:\n\t\treturn NULL;\n\t}\n}\n\n#endif\n")
	return w.Bytes()
}
