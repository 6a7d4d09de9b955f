package ptx

import (
	"fmt"
	"strings"
)

// tokKind classifies a PTX token.
type tokKind uint8

const (
	tkEOF    tokKind = iota
	tkIdent          // identifiers, opcodes with their modifiers, directives, registers
	tkNumber         // integer or float literal in any PTX notation
	tkString         // "..." (only in .file, .pragma and the like)
	tkPunct          // one of , ; : { } [ ] ( ) + - ! @ | < > =
)

type token struct {
	kind tokKind
	text string
	line int
}

func (t token) String() string {
	if t.kind == tkEOF {
		return "end of input"
	}
	return fmt.Sprintf("%q", t.text)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || c == '%' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool {
	return isIdentStart(c) || (c >= '0' && c <= '9') || c == ':'
}

// lex splits PTX source into tokens. Comments vanish; line numbers are kept
// so that errors can point at the source. Debug-only lines (.loc, .file,
// @@DWARF) are dropped here because they can hold free-form text.
func lex(src string) ([]token, error) {
	toks := make([]token, 0, len(src)/4)
	line := 1
	i := 0
	n := len(src)
	atLineStart := true
	for i < n {
		c := src[i]
		if c == '\n' {
			line++
			i++
			atLineStart = true
			continue
		}
		if c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' {
			i++
			continue
		}
		if atLineStart {
			atLineStart = false
			rest := src[i:]
			if isDebugLine(rest) {
				for i < n && src[i] != '\n' {
					i++
				}
				continue
			}
		}
		if c == '/' && i+1 < n && src[i+1] == '/' {
			for i < n && src[i] != '\n' {
				i++
			}
			continue
		}
		if c == '/' && i+1 < n && src[i+1] == '*' {
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated comment", line)
			}
			line += strings.Count(src[i:i+2+end], "\n")
			i += end + 4
			continue
		}
		start := i
		switch {
		case c == '"':
			i++
			for i < n && src[i] != '"' && src[i] != '\n' {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			if i >= n || src[i] != '"' {
				return nil, fmt.Errorf("line %d: unterminated string", line)
			}
			i++
			toks = append(toks, token{tkString, src[start:i], line})
		case c >= '0' && c <= '9':
			i++
			for i < n && (isIdentChar(src[i]) && src[i] != ':' || src[i] == '.' ||
				((src[i] == '+' || src[i] == '-') && (src[i-1] == 'e' || src[i-1] == 'E') && !strings.HasPrefix(src[start:], "0x") && !strings.HasPrefix(src[start:], "0X"))) {
				i++
			}
			toks = append(toks, token{tkNumber, src[start:i], line})
		case isIdentStart(c):
			i++
			for i < n && isIdentChar(src[i]) {
				// A ':' ends a label ("$L__BB0_1:") unless it is part of a
				// "::" qualifier (".L1::no_allocate").
				if src[i] == ':' {
					if i+1 < n && src[i+1] == ':' {
						i += 2
						continue
					}
					if i > 0 && src[i-1] == ':' {
						i++
						continue
					}
					break
				}
				i++
			}
			toks = append(toks, token{tkIdent, src[start:i], line})
		case strings.IndexByte(",;:{}[]()+-!@|<>=", c) >= 0:
			i++
			toks = append(toks, token{tkPunct, src[start:i], line})
		default:
			return nil, fmt.Errorf("line %d: unexpected character %q", line, c)
		}
	}
	toks = append(toks, token{kind: tkEOF, line: line})
	return toks, nil
}

// isDebugLine reports whether a line is a .loc/.file directive or an old
// @@DWARF line, none of which affect execution.
func isDebugLine(rest string) bool {
	for _, d := range []string{".loc", ".file", "@@DWARF"} {
		if strings.HasPrefix(rest, d) && len(rest) > len(d) && (rest[len(d)] == ' ' || rest[len(d)] == '\t') {
			return true
		}
	}
	return false
}
