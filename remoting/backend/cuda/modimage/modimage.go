// Package modimage reads what a CUDA module image defines that its
// kernels can change outside the allocations a program made: the
// module-scope variables in the global and constant state spaces, and
// whether it allocates on the device heap, which lives in driver memory
// nobody can enumerate.
//
// A checkpoint shortcut relies on the answer, so it errs one way only:
// whatever it cannot read with certainty makes Inspect say ok=false, and
// a name too many in Globals costs nothing (the caller then fails to
// find it and gives up the shortcut), where a name too few would lose
// state.
package modimage

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"maps"
	"slices"
	"strings"
)

// Info is what a module image defines that its kernels can change outside the allocations a program made.
type Info struct {
	Globals []string // names of the module-scope variables (global and constant state spaces) the image defines, sorted, no duplicates
	Heap    bool     // the image calls the device runtime's malloc or free (or anything else that can allocate on the device heap)
}

// Fatbin layout, as nvcc 12.4 writes it (checked against nvcc -fatbin
// output with and without --no-compress). The container header is
// magic u32, version u16, header size u16, size of the entries u64.
// Each entry starts with kind u16, u16, header size u32, payload size
// u64 (padded to 8), compressed size u32 at 16, arch u32 at 28 and
// flags u64 at 40; the payload follows the entry's header.
const (
	fatbinMagic    = 0xBA55ED50
	fatbinKindPTX  = 1
	fatbinKindELF  = 2
	entryMinHeader = 48 // the fields read here end with the flags
	// Compression flags: 0x1000 and 0x2000 are NVIDIA's LZ variants (nvcc
	// 12 sets 0x2000 by default), 0x8000 is zstd (newer toolkits).
	fatbinCompressed = 0x1000 | 0x2000 | 0x8000
)

// Inspect reads image (PTX text, possibly NUL-terminated; an ELF64 cubin; or a fatbin container whose entries are PTX or cubins). ok is false when any part of it cannot be read with certainty (a compressed fatbin entry, an unknown format, a truncated or malformed file, an entry kind it does not know).
func Inspect(image []byte) (info Info, ok bool) {
	s := &scan{globals: map[string]bool{}}
	switch {
	case bytes.HasPrefix(image, []byte("\x7fELF")):
		ok = s.elf(image)
	case len(image) >= 4 && binary.LittleEndian.Uint32(image) == fatbinMagic:
		ok = s.fatbin(image)
	default:
		ok = s.ptx(image, false)
	}
	if !ok {
		return Info{}, false
	}
	return Info{Globals: slices.Sorted(maps.Keys(s.globals)), Heap: s.heap}, true
}

// scan accumulates what the parts of one image define.
type scan struct {
	globals map[string]bool
	heap    bool
}

// heapName tells whether a function name reaches the device heap:
// malloc and free themselves (C++ new and delete compile to them),
// __nv_aligned_device_malloc (__cuda_syscall_aligned_malloc in PTX), and
// the device runtime of dynamic parallelism (__cudaCDP2Malloc and its
// siblings, cudaMalloc and cudaXxx with CDP1), whose launches and
// allocations also live in driver memory. A user function that happens
// to match only costs the shortcut.
func heapName(name string) bool {
	return name == "free" || strings.Contains(strings.ToLower(name), "malloc") ||
		strings.HasPrefix(name, "__cudaCDP") || strings.HasPrefix(name, "__cuda_syscall") ||
		len(name) > 4 && strings.HasPrefix(name, "cuda") && name[4] >= 'A' && name[4] <= 'Z'
}

// fatbin walks one or more fatbin containers laid end to end; trailing
// zero bytes (alignment padding) are allowed after the last one.
func (s *scan) fatbin(b []byte) bool {
	le := binary.LittleEndian
	entries := 0
	for off := 0; off < len(b); {
		rest := b[off:]
		if allZero(rest) && entries > 0 {
			break
		}
		if len(rest) < 16 || le.Uint32(rest) != fatbinMagic || le.Uint16(rest[4:]) != 1 {
			return false
		}
		hdr, size := uint64(le.Uint16(rest[6:])), le.Uint64(rest[8:])
		if hdr < 16 || hdr > uint64(len(rest)) || size > uint64(len(rest))-hdr {
			return false
		}
		body := rest[hdr : hdr+size]
		for len(body) > 0 {
			if len(body) < entryMinHeader {
				return false
			}
			kind := le.Uint16(body)
			eh, psize := uint64(le.Uint32(body[4:])), le.Uint64(body[8:])
			flags := le.Uint64(body[40:])
			if eh < entryMinHeader || eh > uint64(len(body)) || psize > uint64(len(body))-eh {
				return false
			}
			payload := body[eh : eh+psize]
			body = body[eh+psize:]
			entries++
			if flags&fatbinCompressed != 0 {
				return false
			}
			// The payload is checked for what its kind says it is, which
			// also rejects a compressed one whose flag we do not know.
			switch kind {
			case fatbinKindPTX:
				if !s.ptx(payload, true) {
					return false
				}
			case fatbinKindELF:
				if !bytes.HasPrefix(payload, []byte("\x7fELF")) || !s.elf(payload) {
					return false
				}
			default:
				return false
			}
		}
		off += int(hdr + size)
	}
	return entries > 0
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// elf reads a cubin's symbol table: data symbols defined in .nv.global
// (uninitialised __device__ and __managed__ variables), .nv.global.init
// (initialised ones, string literals, libdevice tables) and the constant
// banks other than 0, which holds each kernel's parameters (user
// __constant__ variables are in .nv.constant3, compiler literals in
// .nv.constant2.<kernel>, relocated addresses in .nv.constant4).
func (s *scan) elf(b []byte) (ok bool) {
	defer func() {
		// debug/elf is not hardened against every malformed file.
		if recover() != nil {
			ok = false
		}
	}()
	if len(b) < 64 || b[elf.EI_CLASS] != byte(elf.ELFCLASS64) || b[elf.EI_DATA] != byte(elf.ELFDATA2LSB) {
		return false
	}
	// nvcc writes its ABI version (124 for CUDA 12) into e_version,
	// which debug/elf refuses unless it reads EV_CURRENT: read a copy
	// that says so.
	b = slices.Clone(b)
	binary.LittleEndian.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil || f.Machine != elf.EM_CUDA {
		return false
	}
	syms, err := f.Symbols()
	if err != nil {
		return false // no symbol table: nothing says what the sections hold
	}
	for _, sec := range f.Sections {
		// Writable memory in a section we do not know could hold state
		// that outlives a launch and that no name reaches. Shared and
		// local memory (.nv_debug.shared with -G) do not outlive one.
		w := elf.SHF_ALLOC | elf.SHF_WRITE
		if sec.Flags&w == w && sec.Size > 0 && !stateSection(sec.Name) && sec.Name != ".nv_debug.shared" &&
			!strings.HasPrefix(sec.Name, ".nv.shared") && !strings.HasPrefix(sec.Name, ".nv.local") {
			return false
		}
	}
	for _, sym := range syms {
		if heapName(sym.Name) {
			s.heap = true // called (undefined) or linked in (defined)
		}
		switch elf.ST_TYPE(sym.Info) {
		case elf.STT_FUNC, elf.STT_SECTION, elf.STT_FILE:
			continue
		}
		if sym.Section == elf.SHN_UNDEF {
			continue // extern, defined by another module
		}
		if sym.Section >= elf.SHN_LORESERVE || int(sym.Section) >= len(f.Sections) {
			return false // absolute or common data: no section to place it
		}
		if !stateSection(f.Sections[sym.Section].Name) {
			continue
		}
		if sym.Name == "" {
			return false
		}
		// Relocatable cubins (-rdc) type these STT_LOPROC (13), linked
		// ones STT_OBJECT; either way the symbol is the variable.
		s.globals[sym.Name] = true
	}
	return true
}

// stateSection tells whether a cubin section holds module variables.
func stateSection(name string) bool {
	if name == ".nv.constant0" || strings.HasPrefix(name, ".nv.constant0.") {
		return false
	}
	return strings.HasPrefix(name, ".nv.global") || strings.HasPrefix(name, ".nv.constant")
}

// ptx reads PTX text up to its first NUL; padded (a fatbin entry) also
// requires only NULs after it.
func (s *scan) ptx(b []byte, padded bool) bool {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		if padded && !allZero(b[i:]) {
			return false
		}
		b = b[:i]
	}
	toks, ok := lex(b)
	if !ok || len(toks) < 2 || toks[0] != ".version" {
		return false // a PTX module starts with .version
	}
	for _, t := range toks {
		if isIdent(t) && heapName(t) {
			s.heap = true // declared or called: either way it may be
		}
	}
	return s.statements(toks)
}

// statements splits a module's tokens into top-level statements and
// function bodies. Initializer braces follow "="; any other top-level
// brace opens a function body or a debug .section.
func (s *scan) statements(toks []string) bool {
	var stmt []string
	depth, paren := 0, 0
	afterFunc := false // a function header just ended at ";" (.pragma)
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if len(stmt) == 0 {
			// Directives that take no ";".
			if n, ok := bare(toks[i:]); !ok {
				return false
			} else if n > 0 {
				i += n - 1
				afterFunc = false
				continue
			}
		}
		switch t {
		case "(":
			paren++
		case ")":
			if paren--; paren < 0 {
				return false
			}
		case "{":
			if depth == 0 && paren == 0 && (isBlock(stmt) || len(stmt) == 0 && afterFunc) {
				end, ok := body(toks, i)
				if !ok {
					return false
				}
				i, stmt, afterFunc = end, stmt[:0], false
				continue
			}
			if depth == 0 && !slices.Contains(stmt, "=") {
				return false
			}
			depth++
		case "}":
			if depth--; depth < 0 {
				return false
			}
		case ";":
			if depth == 0 && paren == 0 {
				if !s.statement(stmt) {
					return false
				}
				afterFunc = isBlock(stmt)
				stmt = stmt[:0]
				continue
			}
		}
		stmt = append(stmt, t)
	}
	return len(stmt) == 0 && depth == 0 && paren == 0 // else truncated
}

// bare returns how many tokens a leading .version, .target,
// .address_size or .file directive spans (0 when toks starts with
// something else).
func bare(toks []string) (int, bool) {
	arg := func(i int, ok func(string) bool) bool { return i < len(toks) && ok(toks[i]) }
	switch toks[0] {
	case ".version", ".address_size":
		return 2, arg(1, isNumber)
	case ".target", ".file":
		n := 2
		first, rest := isIdent, isIdent
		if toks[0] == ".file" {
			// .file index "name" [, timestamp, size]
			n, first, rest = 3, isNumber, isNumber
			if !arg(2, isString) {
				return 0, false
			}
		}
		if !arg(1, first) {
			return 0, false
		}
		for arg(n, func(t string) bool { return t == "," }) {
			if !arg(n+1, rest) {
				return 0, false
			}
			n += 2
		}
		return n, true
	}
	return 0, true
}

// isBlock tells whether a statement header opens a body: a function
// definition or a DWARF .section.
func isBlock(stmt []string) bool {
	return len(stmt) > 0 && stmt[0] == ".section" || slices.Contains(stmt, ".entry") || slices.Contains(stmt, ".func")
}

// body returns the index of the "}" that closes the body opened at
// toks[i]. A .global or .const declaration inside it fails: ptxas gives
// such a variable a name of its own ($__name__N), which no one can look
// up, so its state could not be saved.
func body(toks []string, i int) (int, bool) {
	depth := 0
	for ; i < len(toks); i++ {
		switch toks[i] {
		case "{":
			depth++
		case "}":
			if depth--; depth == 0 {
				return i, true
			}
		case ".global", ".const":
			return 0, false
		}
	}
	return 0, false
}

// linkage are the modifiers that may precede a module-scope declaration.
var linkage = map[string]bool{".visible": true, ".weak": true, ".extern": true, ".common": true}

// statement reads one top-level statement (without its ";").
func (s *scan) statement(stmt []string) bool {
	if len(stmt) == 0 {
		return true
	}
	i, extern := 0, false
	for ; i < len(stmt) && linkage[stmt[i]]; i++ {
		extern = extern || stmt[i] == ".extern"
	}
	if i == len(stmt) {
		return false
	}
	switch stmt[i] {
	case ".global", ".const":
		return s.variable(stmt[i+1:], extern)
	case ".entry", ".func", ".shared", ".local", ".pragma", ".alias":
		// Declarations of functions, and variables that do not outlive
		// a launch.
		return true
	}
	return false // .tex or a directive this reader does not know
}

// variable reads what follows .global or .const: attributes and a type,
// then declarators "name[dims] = init" separated by commas.
func (s *scan) variable(t []string, extern bool) bool {
	i := 0
	for ; i < len(t) && strings.HasPrefix(t[i], "."); i++ {
		switch t[i] {
		case ".align":
			if i++; i >= len(t) || !isNumber(t[i]) {
				return false
			}
		case ".attribute": // .attribute(.managed)
			if i+3 >= len(t) || t[i+1] != "(" || t[i+3] != ")" {
				return false
			}
			i += 3
		case ".texref", ".samplerref", ".surfref", ".tex":
			// Opaque handles the host binds: state outside any variable.
			return false
		}
	}
	for {
		if i >= len(t) || !isIdent(t[i]) {
			return false
		}
		name := t[i]
		for i++; i < len(t) && t[i] == "["; i++ {
			if i++; i < len(t) && isNumber(t[i]) {
				i++
			}
			if i >= len(t) || t[i] != "]" {
				return false
			}
		}
		if i < len(t) && t[i] == "=" {
			for depth := 0; i < len(t) && (depth > 0 || t[i] != ","); i++ {
				switch t[i] {
				case "{", "(":
					depth++
				case "}", ")":
					depth--
				}
			}
		}
		if !extern {
			s.globals[name] = true
		}
		if i == len(t) {
			return true
		}
		if t[i] != "," {
			return false
		}
		i++
	}
}

// lex splits PTX into tokens: directives (.name), identifiers (which may
// contain dots, as in ld.global.u32), numbers, strings and single
// punctuation characters. Comments are dropped; bytes PTX cannot hold
// outside comments and strings fail.
func lex(b []byte) ([]string, bool) {
	var toks []string
	word := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c == '.'
	}
	for i := 0; i < len(b); {
		c, start := b[i], i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case bytes.HasPrefix(b[i:], []byte("//")):
			if j := bytes.IndexByte(b[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(b)
			}
			continue
		case bytes.HasPrefix(b[i:], []byte("/*")):
			j := bytes.Index(b[i+2:], []byte("*/"))
			if j < 0 {
				return nil, false
			}
			i += j + 4
			continue
		case c == '"':
			for i++; i < len(b) && b[i] != '"' && b[i] != '\n'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) || b[i] != '"' {
				return nil, false
			}
			i++
		case word(c) || c == '%':
			for i++; i < len(b) && word(b[i]); i++ {
			}
		case c > ' ' && c < 0x7f:
			i++
		default:
			return nil, false
		}
		toks = append(toks, string(b[start:i]))
	}
	return toks, true
}

func isIdent(t string) bool {
	if t == "" || strings.Contains(t, ".") || t[0] >= '0' && t[0] <= '9' || t[0] == '"' {
		return false
	}
	for k := 0; k < len(t); k++ {
		c := t[k]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$' ||
			k > 0 && c >= '0' && c <= '9' || k == 0 && c == '%'
		if !ok {
			return false
		}
	}
	return len(t) > 1 || t[0] != '_' && t[0] != '$' && t[0] != '%'
}

func isNumber(t string) bool { return t != "" && t[0] >= '0' && t[0] <= '9' }

func isString(t string) bool { return len(t) >= 2 && t[0] == '"' }
