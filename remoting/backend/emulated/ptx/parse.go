package ptx

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ast is a parsed PTX module.
type ast struct {
	version  string
	verMajor int
	verMinor int
	target   string
	sm       int
	addrSize int
	vars     []*varDecl // module scope .global/.const/.shared
	funcs    []*funcDecl
}

type parser struct {
	toks  []token
	pos   int
	depth int // nesting of operands and initializers
}

// maxNesting bounds nested braces and operands so that hostile input
// cannot recurse without limit.
const maxNesting = 64

func (p *parser) enter() {
	if p.depth++; p.depth > maxNesting {
		p.failf("nesting deeper than %d", maxNesting)
	}
}

func (p *parser) leave() { p.depth-- }

// parseError is a syntax error at a source line.
type parseError struct {
	line int
	msg  string
}

func (e *parseError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tkEOF {
		p.pos++
	}
	return t
}

func (p *parser) failf(format string, args ...any) {
	panic(&parseError{line: p.peek().line, msg: fmt.Sprintf(format, args...)})
}

func (p *parser) is(text string) bool {
	t := p.peek()
	return t.kind != tkEOF && t.kind != tkString && t.text == text
}

func (p *parser) accept(text string) bool {
	if p.is(text) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(text string) {
	if !p.accept(text) {
		p.failf("expected %q, found %s", text, p.peek())
	}
}

func (p *parser) ident() string {
	t := p.next()
	if t.kind != tkIdent {
		p.pos--
		p.failf("expected a name, found %s", t)
	}
	return t.text
}

func (p *parser) number() uint64 {
	neg := p.accept("-")
	t := p.next()
	if t.kind != tkNumber {
		p.pos--
		p.failf("expected a number, found %s", t)
	}
	v, isFloat, _, err := parseNumber(t.text)
	if err != nil || isFloat {
		p.pos--
		p.failf("bad integer %q", t.text)
	}
	if neg {
		v = -v
	}
	return v
}

// parseSource parses PTX text. Syntax errors come back as *parseError;
// the parser never panics past this function.
func parseSource(src string) (m *ast, err error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(*parseError)
			if !ok {
				panic(r)
			}
			m, err = nil, pe
		}
	}()
	return p.module(), nil
}

func (p *parser) module() *ast {
	m := &ast{addrSize: 64}
	for p.peek().kind != tkEOF {
		t := p.peek()
		switch t.text {
		case ".version":
			p.next()
			v := p.next()
			m.version = v.text
			maj, min, ok := strings.Cut(v.text, ".")
			a, err1 := strconv.Atoi(maj)
			b, err2 := strconv.Atoi(min)
			if !ok || err1 != nil || err2 != nil {
				p.pos--
				p.failf("bad .version %q", v.text)
			}
			m.verMajor, m.verMinor = a, b
		case ".target":
			p.next()
			for {
				name := p.ident()
				if strings.HasPrefix(name, "sm_") && m.target == "" {
					m.target = name
					digits := strings.TrimRight(strings.TrimPrefix(name, "sm_"), "abf")
					n, err := strconv.Atoi(digits)
					if err != nil {
						p.pos--
						p.failf("bad .target %q", name)
					}
					m.sm = n
				}
				if !p.accept(",") {
					break
				}
			}
		case ".address_size":
			p.next()
			m.addrSize = int(p.number())
		case ".pragma":
			p.next()
			p.next()
			p.expect(";")
		case ".section":
			p.skipSection()
		case ".alias", ".tex", ".texref", ".samplerref", ".surfref":
			for !p.is(";") && p.peek().kind != tkEOF {
				p.next()
			}
			p.expect(";")
		default:
			p.topLevel(m)
		}
	}
	return m
}

func (p *parser) skipSection() {
	p.next()
	for !p.is("{") {
		if p.peek().kind == tkEOF {
			p.failf("unterminated .section")
		}
		p.next()
	}
	depth := 0
	for {
		t := p.next()
		if t.kind == tkEOF {
			p.failf("unterminated .section")
		}
		if t.kind == tkPunct && t.text == "{" {
			depth++
		}
		if t.kind == tkPunct && t.text == "}" {
			depth--
			if depth == 0 {
				return
			}
		}
	}
}

// topLevel parses a linking-qualified declaration: a variable or a function.
func (p *parser) topLevel(m *ast) {
	extern := false
	for {
		switch {
		case p.accept(".visible"), p.accept(".weak"), p.accept(".common"):
			continue
		case p.accept(".extern"):
			extern = true
			continue
		}
		break
	}
	t := p.peek()
	switch t.text {
	case ".entry", ".func":
		// Declarations without a body (.extern prototypes such as
		// vprintf) are kept so that calls to them resolve.
		m.funcs = append(m.funcs, p.function())
	case ".global", ".const", ".shared":
		p.next()
		for _, v := range p.varDecls(t.text[1:], true) {
			v.extern = extern
			m.vars = append(m.vars, v)
		}
		p.expect(";")
	default:
		p.failf("unexpected %s at module scope", t)
	}
}

// varDecls parses the rest of a declaration after its state space:
// qualifiers, type, and one or more names.
func (p *parser) varDecls(space string, multi bool) []*varDecl {
	proto := varDecl{space: space, count: 1, line: p.peek().line}
	for {
		t := p.peek()
		if t.kind != tkIdent || !strings.HasPrefix(t.text, ".") {
			break
		}
		p.next()
		switch t.text {
		case ".align":
			proto.align = int(p.number())
		case ".v2":
			proto.vec = 2
		case ".v4":
			proto.vec = 4
		case ".v8":
			proto.vec = 8
		case ".ptr", ".global", ".shared", ".const", ".local":
			// kernel-parameter pointer attributes: informational only
		default:
			if ty, ok := typeNames[t.text[1:]]; ok {
				proto.typ = ty
				continue
			}
			p.pos--
			p.failf("unknown qualifier %s in declaration", t)
		}
	}
	if proto.typ == tNone {
		p.failf("declaration without a type")
	}
	var out []*varDecl
	for {
		v := proto
		v.name = p.ident()
		if p.accept("<") {
			n := p.number()
			if n > maxSlots {
				p.failf("%d registers in one declaration; at most %d are supported", n, maxSlots)
			}
			v.regN = int(n)
			p.expect(">")
		}
		for p.accept("[") {
			if p.accept("]") {
				v.count = -1
				continue
			}
			n := p.number()
			p.expect("]")
			if n > 1<<34 || v.count < 0 {
				p.failf("array too large")
			}
			v.count *= int(n)
			if v.count > 1<<34 {
				p.failf("array too large")
			}
		}
		if p.accept("=") {
			v.init = p.initializer(nil)
		}
		out = append(out, &v)
		if !multi || !p.accept(",") {
			break
		}
	}
	return out
}

func (p *parser) initializer(acc []operand) []operand {
	p.enter()
	defer p.leave()
	if p.accept("{") {
		for !p.is("}") {
			acc = p.initializer(acc)
			if !p.accept(",") {
				break
			}
		}
		p.expect("}")
		return acc
	}
	return append(acc, p.operand())
}

func (p *parser) function() *funcDecl {
	kw := p.next()
	f := &funcDecl{entry: kw.text == ".entry", line: kw.line}
	if !f.entry && p.is("(") {
		f.rets = p.paramList()
	}
	f.name = p.ident()
	if p.is("(") {
		f.params = p.paramList()
	}
	for {
		t := p.peek()
		switch t.text {
		case ".maxntid", ".reqntid", ".reqnctapercluster":
			p.next()
			var dims [3]int
			for i := 0; i < 3; i++ {
				dims[i] = int(p.number())
				if !p.accept(",") {
					break
				}
			}
			for i := range dims {
				if dims[i] == 0 {
					dims[i] = 1
				}
			}
			if t.text == ".maxntid" {
				f.maxntid = dims
			} else if t.text == ".reqntid" {
				f.reqntid = dims
			}
			continue
		case ".minnctapersm", ".maxnreg", ".maxclusterrank", ".maxnctapersm":
			p.next()
			p.number()
			continue
		case ".noreturn", ".explicitcluster":
			p.next()
			continue
		case ".pragma":
			p.next()
			p.next()
			p.expect(";")
			continue
		}
		break
	}
	if p.accept(";") {
		return f
	}
	p.expect("{")
	f.hasBody = true
	f.body = p.body()
	return f
}

func (p *parser) paramList() []*varDecl {
	p.expect("(")
	var out []*varDecl
	for !p.is(")") {
		t := p.next()
		if t.text != ".param" && t.text != ".reg" {
			p.pos--
			p.failf("expected .param, found %s", t)
		}
		vs := p.varDecls("param", false)
		out = append(out, vs...)
		if !p.accept(",") {
			break
		}
	}
	p.expect(")")
	return out
}

// body parses statements up to the function's closing brace.
func (p *parser) body() []stmt {
	var out []stmt
	depth := 0
	for {
		t := p.peek()
		if t.kind == tkEOF {
			p.failf("unterminated function body")
		}
		if t.kind == tkPunct {
			switch t.text {
			case "{":
				p.next()
				depth++
				out = append(out, stmt{kind: stOpen})
				continue
			case "}":
				p.next()
				if depth == 0 {
					return out
				}
				depth--
				out = append(out, stmt{kind: stClose})
				continue
			case ";":
				p.next()
				continue
			}
		}
		switch t.text {
		case ".reg", ".local", ".shared", ".param", ".const", ".global":
			p.next()
			for _, v := range p.varDecls(t.text[1:], true) {
				out = append(out, stmt{kind: stDecl, decl: v})
			}
			p.expect(";")
			continue
		case ".pragma":
			p.next()
			p.next()
			p.expect(";")
			continue
		}
		if t.kind == tkIdent && p.toks[p.pos+1].kind == tkPunct && p.toks[p.pos+1].text == ":" {
			p.pos += 2
			if p.is(".callprototype") {
				// "proto: .callprototype (...) _ (...);" declares the
				// signature of an indirect call; it is not a label.
				for !p.is(";") && p.peek().kind != tkEOF {
					p.next()
				}
				p.expect(";")
				continue
			}
			out = append(out, stmt{kind: stLabel, label: t.text})
			continue
		}
		out = append(out, stmt{kind: stInstr, in: p.instruction()})
	}
}

func (p *parser) instruction() *instr {
	startPos := p.pos
	in := &instr{line: p.peek().line}
	if p.accept("@") {
		in.guardNeg = p.accept("!")
		in.guard = p.ident()
	}
	opTok := p.next()
	if opTok.kind != tkIdent || strings.HasPrefix(opTok.text, ".") || strings.HasPrefix(opTok.text, "%") {
		p.pos--
		p.failf("expected an instruction, found %s", opTok)
	}
	parts := strings.Split(opTok.text, ".")
	in.op = parts[0]
	for _, m := range parts[1:] {
		if m == "" {
			p.pos--
			p.failf("bad instruction %q", opTok.text)
		}
		in.mods = append(in.mods, m)
	}
	for !p.is(";") {
		if p.peek().kind == tkEOF {
			p.failf("missing ';' after instruction")
		}
		in.args = append(in.args, p.operand())
		if !p.accept(",") {
			break
		}
	}
	p.expect(";")
	var sb strings.Builder
	for i := startPos; i < p.pos-1; i++ {
		t := p.toks[i]
		if i > startPos && !(t.kind == tkPunct && (t.text == "," || t.text == "]" || t.text == ")" || t.text == "}" || t.text == "+" || t.text == "|")) &&
			!(p.toks[i-1].kind == tkPunct && (p.toks[i-1].text == "[" || p.toks[i-1].text == "(" || p.toks[i-1].text == "{" || p.toks[i-1].text == "+" || p.toks[i-1].text == "@" || p.toks[i-1].text == "!" || p.toks[i-1].text == "|" || p.toks[i-1].text == "-")) {
			sb.WriteByte(' ')
		}
		sb.WriteString(t.text)
	}
	in.text = sb.String()
	return in
}

func (p *parser) operand() operand {
	p.enter()
	defer p.leave()
	t := p.next()
	switch {
	case t.kind == tkPunct && t.text == "[":
		var o operand
		o.kind = oAddr
		if p.peek().kind == tkNumber || p.is("-") {
			o.ival = p.number()
		} else {
			b := p.operand()
			if b.kind != oReg && b.kind != oSym {
				p.failf("bad address base")
			}
			o.base = &b
			for p.is("+") || p.is("-") {
				neg := p.next().text == "-"
				if p.accept("-") {
					neg = !neg
				}
				v := p.number()
				if neg {
					v = -v
				}
				o.ival += v
			}
			// texture and surface coordinates: [tex, {x, y}]
			for p.accept(",") {
				o.elems = append(o.elems, p.operand())
				if len(o.elems) > 8 {
					p.failf("address too long")
				}
			}
		}
		p.expect("]")
		return o
	case t.kind == tkPunct && t.text == "{":
		o := operand{kind: oVec}
		for !p.is("}") {
			o.elems = append(o.elems, p.operand())
			if len(o.elems) > 64 {
				p.failf("vector too long")
			}
			if !p.accept(",") {
				break
			}
		}
		p.expect("}")
		return o
	case t.kind == tkPunct && t.text == "(":
		o := operand{kind: oList}
		for !p.is(")") {
			o.elems = append(o.elems, p.operand())
			if len(o.elems) > 4096 {
				p.failf("list too long")
			}
			if !p.accept(",") {
				break
			}
		}
		p.expect(")")
		return o
	case t.kind == tkPunct && t.text == "!":
		o := p.operand()
		o.neg = !o.neg
		return o
	case t.kind == tkPunct && t.text == "-":
		if p.peek().kind != tkNumber {
			p.failf("expected a number after '-'")
		}
		o := p.operand()
		if o.kind == oFImm {
			if o.f64 {
				o.ival ^= 1 << 63
			} else {
				o.ival ^= 1 << 31
			}
		} else {
			o.ival = -o.ival
		}
		return o
	case t.kind == tkNumber:
		v, isFloat, is64, err := parseNumber(t.text)
		if err != nil {
			p.pos--
			p.failf("bad number %q", t.text)
		}
		if isFloat {
			return operand{kind: oFImm, ival: v, f64: is64}
		}
		return operand{kind: oImm, ival: v}
	case t.kind == tkIdent:
		o := operand{name: t.text, kind: oSym}
		if t.text == "_" {
			o.kind = oSink
		} else if strings.HasPrefix(t.text, "%") {
			o.kind = oReg
		}
		if p.accept("|") {
			o.pair = p.ident()
		}
		if o.kind == oSym && (p.is("+")) && p.toks[p.pos+1].kind == tkNumber {
			p.next()
			o.ival = p.number()
		}
		// generic(sym) in initializers
		if o.kind == oSym && p.is("(") && (t.text == "generic") {
			p.next()
			inner := p.operand()
			p.expect(")")
			return inner
		}
		return o
	}
	p.pos--
	p.failf("unexpected %s in operand", t)
	return operand{}
}

// parseNumber reads an integer or a float literal. Floats come back as
// bits: float32 bits for 0f literals, float64 bits otherwise.
func parseNumber(s string) (v uint64, isFloat, is64 bool, err error) {
	s = strings.TrimSuffix(strings.TrimSuffix(s, "U"), "u")
	switch {
	case len(s) == 10 && (strings.HasPrefix(s, "0f") || strings.HasPrefix(s, "0F")):
		v, err = strconv.ParseUint(s[2:], 16, 32)
		return v, true, false, err
	case len(s) == 18 && (strings.HasPrefix(s, "0d") || strings.HasPrefix(s, "0D")):
		v, err = strconv.ParseUint(s[2:], 16, 64)
		return v, true, true, err
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		v, err = strconv.ParseUint(s[2:], 16, 64)
		return v, false, false, err
	case strings.HasPrefix(s, "0b") || strings.HasPrefix(s, "0B"):
		v, err = strconv.ParseUint(s[2:], 2, 64)
		return v, false, false, err
	case strings.ContainsAny(s, ".eE"):
		f, err := strconv.ParseFloat(s, 64)
		return math.Float64bits(f), true, true, err
	case len(s) > 1 && s[0] == '0':
		v, err = strconv.ParseUint(s[1:], 8, 64)
		return v, false, false, err
	}
	v, err = strconv.ParseUint(s, 10, 64)
	return v, false, false, err
}
