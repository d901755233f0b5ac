package requests

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds a small reader for JSON that validJSON has already
// validated. It finds the spans of object members and array
// elements without decoding anything, so the request parser can pick the
// fields it needs in one pass and keep prompt strings as sub-slices of the
// body. Every function checks its bounds and reports malformed input
// instead of panicking, but only promises correct results for valid JSON.

// JSON value kinds, from a value's first byte.
const (
	kindInvalid = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

// kindOf returns the kind of the JSON value v (which starts at its first
// byte, without leading white space).
func kindOf(v []byte) int {
	if len(v) == 0 {
		return kindInvalid
	}
	switch c := v[0]; {
	case c == '{':
		return kindObject
	case c == '[':
		return kindArray
	case c == '"':
		return kindString
	case c == 't' || c == 'f':
		return kindBool
	case c == 'n':
		return kindNull
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber
	}
	return kindInvalid
}

// kindName names a kind for error messages.
func kindName(k int) string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	case kindNull:
		return "null"
	}
	return "invalid JSON"
}

// isNull reports whether v is absent or JSON null: both mean "not given"
// for an optional field.
func isNull(v []byte) bool { return len(v) == 0 || v[0] == 'n' }

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// stringEnd returns the index just past the closing quote of the string
// starting at b[i] == '"', and whether the string contains escapes. It
// returns -1 for an unterminated string. It jumps from quote to quote
// (bytes.IndexByte) and counts the backslashes before each one.
func stringEnd(b []byte, i int) (end int, escaped bool) {
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	j := i + 1
	for j <= len(b) {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1, false
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, bytes.IndexByte(b[i+1:q], '\\') >= 0
		}
		j = q + 1
	}
	return -1, false
}

// skipValue returns the index just past the JSON value starting at b[i],
// or -1 if it is malformed or truncated.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		e, _ := stringEnd(b, i)
		return e
	case '{', '[':
		depth := 0
		for p := i; p < len(b); {
			switch b[p] {
			case '"':
				e, _ := stringEnd(b, p)
				if e < 0 {
					return -1
				}
				p = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return p + 1
				}
				if depth < 0 {
					return -1
				}
			}
			p++
		}
		return -1
	}
	p := i
	for p < len(b) {
		c := b[p]
		if c == ',' || c == '}' || c == ']' || c == ':' || isWS(c) || c == '"' || c == '{' || c == '[' {
			break
		}
		p++
	}
	if p == i {
		return -1
	}
	return p
}

// seq is the reading state of an object's members or an array's
// elements.
type seq struct {
	b     []byte
	i     int
	first bool
	// bad is set when the value turned out malformed.
	bad bool
}

// newSeq starts reading the object or array v, which must open with open.
func newSeq(v []byte, open byte) seq {
	if len(v) == 0 || v[0] != open {
		return seq{bad: true}
	}
	return seq{b: v, i: 1, first: true}
}

// advance moves to the next entry, past the comma that separates it from
// the one before, and returns its index. ok is false at closer, the
// closing byte, which ends the sequence, and on malformed input, which
// sets bad.
func (s *seq) advance(closer byte) (i int, ok bool) {
	if s.bad || s.b == nil {
		return 0, false
	}
	b := s.b
	i = skipWS(b, s.i)
	if i >= len(b) {
		s.bad = true
		return 0, false
	}
	if b[i] == closer {
		s.b = nil
		return 0, false
	}
	if !s.first {
		if b[i] != ',' {
			s.bad = true
			return 0, false
		}
		i = skipWS(b, i+1)
	}
	s.first = false
	return i, true
}

// members iterates over the members of a JSON object value.
type members struct{ seq }

// objectMembers starts an iteration over the object v (v[0] == '{').
func objectMembers(v []byte) members { return members{newSeq(v, '{')} }

// next returns the next member: its key's raw bytes (between the quotes,
// still escaped when esc), and its value's span [vs, ve) in the object.
func (m *members) next() (key []byte, esc bool, vs, ve int, ok bool) {
	i, ok := m.advance('}')
	if !ok {
		return nil, false, 0, 0, false
	}
	b := m.b
	ke, kesc := stringEnd(b, i)
	if ke < 0 {
		m.bad = true
		return nil, false, 0, 0, false
	}
	key = b[i+1 : ke-1]
	i = skipWS(b, ke)
	if i >= len(b) || b[i] != ':' {
		m.bad = true
		return nil, false, 0, 0, false
	}
	vs = skipWS(b, i+1)
	ve = skipValue(b, vs)
	if ve < 0 {
		m.bad = true
		return nil, false, 0, 0, false
	}
	m.i = ve
	return key, kesc, vs, ve, true
}

// nextDecoded is next with the key's escapes decoded (into buf when it
// has any) and the value sliced out of the object.
func (m *members) nextDecoded(buf *[64]byte) (key, val []byte, ok bool) {
	key, esc, vs, ve, ok := m.next()
	if !ok {
		return nil, nil, false
	}
	if esc {
		key = appendUnescaped(buf[:0], key)
	}
	return key, m.b[vs:ve], true
}

// maxPicked is how many keys pickMembers looks for at once.
const maxPicked = 5

// pickMembers sets vals[i] to the value of the last member of the object
// obj named keys[i] (JSON keeps the last of duplicate keys), nil when
// there is none, matching keys by their decoded names ("mod\u0065l" is
// "model"). ok is false when obj turned out not to be a well-formed
// object; vals then hold what was read before the fault. Callers pass at
// most maxPicked distinct keys (a programming error otherwise, so it
// panics). It allocates nothing unless a key with escapes decodes to more
// than 64 bytes.
func pickMembers(obj []byte, keys ...string) (vals [maxPicked][]byte, ok bool) {
	if len(keys) > maxPicked {
		panic("requests: pickMembers takes at most maxPicked keys")
	}
	m := objectMembers(obj)
	var buf [64]byte
	for {
		key, val, more := m.nextDecoded(&buf)
		if !more {
			break
		}
		for i, k := range keys {
			if string(key) == k {
				vals[i] = val
				break
			}
		}
	}
	return vals, !m.bad
}

// elements iterates over the elements of a JSON array value.
type elements struct{ seq }

// arrayElements starts an iteration over the array v (v[0] == '[').
func arrayElements(v []byte) elements { return elements{newSeq(v, '[')} }

// next returns the next element's raw value.
func (e *elements) next() ([]byte, bool) {
	i, ok := e.advance(']')
	if !ok {
		return nil, false
	}
	end := skipValue(e.b, i)
	if end < 0 {
		e.bad = true
		return nil, false
	}
	e.i = end
	return e.b[i:end], true
}

// keyIs reports whether a raw object key equals name, decoding escapes
// in the key when it has any ("mod\u0065l" is "model").
func keyIs(key []byte, esc bool, name string) bool {
	if !esc {
		return string(key) == name
	}
	var buf [64]byte
	return string(appendUnescaped(buf[:0], key)) == name
}

// member returns the value of the last member named name in the object
// v (JSON keeps the last of duplicate keys), or nil.
func member(v []byte, name string) []byte {
	vals, _ := pickMembers(v, name)
	return vals[0]
}

// stringContent returns the bytes between the quotes of the string value
// v, and whether they hold escapes.
func stringContent(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	inner := v[1 : len(v)-1]
	return inner, bytes.IndexByte(inner, '\\') >= 0
}

// appendString appends the decoded text of the JSON string value v.
func appendString(dst, v []byte) []byte {
	inner, esc := stringContent(v)
	if !esc {
		return append(dst, inner...)
	}
	return appendUnescaped(dst, inner)
}

// decodeString returns the decoded text of the JSON string value v: a
// sub-slice of v when it has no escapes, else a new slice.
func decodeString(v []byte) []byte {
	inner, esc := stringContent(v)
	if !esc {
		return inner
	}
	return appendUnescaped(make([]byte, 0, len(inner)), inner)
}

// appendUnescaped appends the decoded form of the raw string content s
// (the bytes between the quotes of a JSON string). Escapes decode as
// encoding/json decodes them (an unpaired surrogate becomes U+FFFD); other
// bytes are copied as they are, so invalid UTF-8 is kept, not replaced.
func appendUnescaped(dst, s []byte) []byte {
	for len(s) > 0 {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:k]...)
		s = s[k:]
		if len(s) < 2 {
			return append(dst, s...)
		}
		switch s[1] {
		case '"', '\\', '/':
			dst = append(dst, s[1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[2:])
			if !ok {
				dst = append(dst, s[:2]...)
				s = s[2:]
				continue
			}
			s = s[6:]
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					if v, ok := hex4(s[2:]); ok {
						r2 = v
					}
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					s = s[6:]
					r = dec
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			dst = append(dst, s[:2]...)
		}
		s = s[2:]
	}
	return dst
}

// hex4 decodes four hexadecimal digits.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

const hexDigits = "0123456789abcdef"

// appendQuoted appends s as a JSON string: quotes, backslashes and control
// characters escaped, U+2028 and U+2029 escaped (as encoding/json does),
// invalid UTF-8 replaced by U+FFFD, and <, > and & left as they are.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// needsQuoting reports whether appendQuoted would change s other than
// adding the quotes.
func needsQuoting(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			return true
		}
		i += size
	}
	return false
}

// Results of parseInteger.
const (
	intOK       = iota
	intNotInt   // not a number, or a number with a fraction
	intNegative // a negative integer
)

// parseInteger reads the JSON number v as a non-negative integer. Numbers
// written with a fraction or exponent count when their value is integral
// (100.0, 1e3). Values above limit (including ones too large for int64)
// are clamped to limit.
func parseInteger(v []byte, limit int64) (int64, int) {
	if kindOf(v) != kindNumber {
		return 0, intNotInt
	}
	if bytes.IndexAny(v, ".eE") < 0 {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				if v[0] == '-' {
					return 0, intNegative
				}
				return limit, intOK
			}
			return 0, intNotInt
		}
		if n < 0 {
			return 0, intNegative
		}
		return min(n, limit), intOK
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil && !math.IsInf(f, 0) {
		return 0, intNotInt
	}
	if math.IsInf(f, 0) {
		if f < 0 {
			return 0, intNegative
		}
		return limit, intOK
	}
	if f != math.Trunc(f) || (f == 0 && bytes.IndexAny(mantissa(v), "123456789") >= 0) {
		// A fraction, or one too small for float64 (1e-400).
		return 0, intNotInt
	}
	if f < 0 {
		return 0, intNegative
	}
	if f >= float64(limit) {
		return limit, intOK
	}
	return int64(f), intOK
}

// mantissa returns the number v without its exponent.
func mantissa(v []byte) []byte {
	if i := bytes.IndexAny(v, "eE"); i >= 0 {
		return v[:i]
	}
	return v
}
