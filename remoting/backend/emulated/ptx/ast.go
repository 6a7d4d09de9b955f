package ptx

// The syntax tree the parser produces and the compiler consumes. It keeps
// PTX's own vocabulary so that error messages can quote the source.

// varDecl is a variable in some state space: module-scope .global/.const/
// .shared, or a function's .local/.shared/.param/.reg.
type varDecl struct {
	space  string // "global", "const", "shared", "local", "param", "reg"
	name   string
	typ    ptype
	vec    int // 0, 2 or 4 (.v2/.v4)
	align  int // bytes; 0 means the type's natural alignment
	count  int // array elements; 1 for scalars, -1 for "[]"
	regN   int // for "%r<N>": N registers named name0..name(N-1); 0 otherwise
	init   []operand
	extern bool
	line   int
}

// size is the variable's size in bytes (0 for an unsized extern array).
func (v *varDecl) size() uint64 {
	n := v.count
	if n < 0 {
		return 0
	}
	el := uint64(v.typ.size())
	if v.vec > 0 {
		el *= uint64(v.vec)
	}
	return el * uint64(n)
}

func (v *varDecl) alignment() uint64 {
	if v.align > 0 {
		return uint64(v.align)
	}
	a := uint64(v.typ.size())
	if v.vec > 0 {
		a *= uint64(v.vec)
	}
	if a == 0 {
		a = 1
	}
	return a
}

// funcDecl is an .entry or .func.
type funcDecl struct {
	name    string
	entry   bool
	params  []*varDecl
	rets    []*varDecl
	body    []stmt
	hasBody bool
	maxntid [3]int
	reqntid [3]int
	line    int
}

type stmtKind uint8

const (
	stInstr stmtKind = iota
	stLabel
	stDecl
	stOpen  // "{"
	stClose // "}"
)

type stmt struct {
	kind  stmtKind
	label string
	decl  *varDecl
	in    *instr
}

// instr is one instruction as written.
type instr struct {
	guard    string // predicate register, "" if unguarded
	guardNeg bool
	op       string   // "add"
	mods     []string // modifiers without dots: ["rn", "f32"]
	args     []operand
	text     string // the source text, for error messages
	line     int
}

type opKind uint8

const (
	oReg  opKind = iota // %r1, or a named register
	oImm                // integer literal
	oFImm               // float literal (bits in ival, f64 flag on width)
	oAddr               // [base+off]
	oVec                // {a, b, ...}
	oSym                // identifier that is not a register: label, variable, function
	oSink               // _
	oList               // (a, b) in call
)

type operand struct {
	kind  opKind
	name  string // register, symbol or base name
	ival  uint64 // immediate bits, or address offset
	f64   bool   // oFImm: ival holds float64 bits (else float32 bits)
	neg   bool   // !%p
	pair  string // second destination of "%r|%p"
	base  *operand
	elems []operand
}
