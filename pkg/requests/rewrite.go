package requests

import "bytes"

// RewriteModel returns body with the value of its top-level "model" member
// replaced by model, written as a JSON string. Every other byte is kept:
// the result is a splice of body, not a re-encoding, so key order,
// spacing and number spellings are preserved. "model" keys inside nested
// objects and the text of strings are never touched. If body has several
// top-level "model" members (duplicate keys), all are replaced, so every
// JSON reader sees the new name.
//
// The result is a new slice, except that body itself is returned when
// every top-level model value is already spelt exactly as the new one.
// RewriteModel returns an *Error when body is not a JSON object or has
// no top-level "model" member. It expects a body Parse accepted and does
// not re-validate it; on other input it may return an error or a splice
// of whatever it could follow, but it never panics.
func RewriteModel(body []byte, model string) ([]byte, error) {
	base := skipWS(body, 0)
	if base >= len(body) {
		return nil, &Error{Message: "body is empty"}
	}
	obj := body[base:]
	if obj[0] != '{' {
		return nil, &Error{Message: "body must be a JSON object, got " + kindName(kindOf(obj))}
	}
	// Spans of the model values, relative to body.
	var spanBuf [4][2]int
	spans := spanBuf[:0]
	m := objectMembers(obj)
	for {
		key, esc, vs, ve, ok := m.next()
		if !ok {
			break
		}
		if keyIs(key, esc, "model") {
			spans = append(spans, [2]int{base + vs, base + ve})
		}
	}
	if m.bad {
		return nil, errInvalidJSON()
	}
	if len(spans) == 0 {
		return nil, &Error{Field: "model", Message: msgRequired}
	}
	var qbuf [128]byte
	quoted := appendQuoted(qbuf[:0], model)
	same := true
	old := 0
	for _, s := range spans {
		old += s[1] - s[0]
		if !bytes.Equal(body[s[0]:s[1]], quoted) {
			same = false
		}
	}
	if same {
		return body, nil
	}
	out := make([]byte, 0, len(body)-old+len(spans)*len(quoted))
	last := 0
	for _, s := range spans {
		out = append(out, body[last:s[0]]...)
		out = append(out, quoted...)
		last = s[1]
	}
	return append(out, body[last:]...), nil
}

// modelKey is what RewriteResponseModel looks for.
const modelKey = `"model":`

// RewriteResponseModel rewrites the model name in a response body chunk
// back to the client-facing name, as GIE v1.5 does: every `"model":"from"`
// becomes `"model":"to"` and every `"model": "from"` becomes
// `"model": "to"` (the names JSON-escaped), wherever they appear, nested
// objects included. Other spellings (other white space) are left alone.
// It returns chunk itself, without allocating, when from or to is empty,
// they are equal, or nothing matches; otherwise a new slice.
func RewriteResponseModel(chunk []byte, from, to string) []byte {
	if from == "" || to == "" || from == to {
		return chunk
	}
	// The quoted name to find; it needs a buffer only when from has
	// characters JSON escapes.
	var fq []byte
	var fbuf [128]byte
	if needsQuoting(from) {
		fq = appendQuoted(fbuf[:0], from)
	}
	var out []byte
	last := 0
	for i := 0; i < len(chunk); {
		k := bytes.Index(chunk[i:], []byte(modelKey))
		if k < 0 {
			break
		}
		p := i + k + len(modelKey)
		i = p
		if p < len(chunk) && chunk[p] == ' ' {
			p++
		}
		n := matchQuoted(chunk[p:], from, fq)
		if n == 0 {
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(chunk)+len(to)-len(from)+8)
		}
		out = append(out, chunk[last:p]...)
		out = appendQuoted(out, to)
		last = p + n
		i = last
	}
	if out == nil {
		return chunk
	}
	return append(out, chunk[last:]...)
}

// matchQuoted returns the length of the JSON string at the start of b if
// it is name (quoted is name's JSON form when name needs escaping, else
// nil), or 0.
func matchQuoted(b []byte, name string, quoted []byte) int {
	if quoted != nil {
		if bytes.HasPrefix(b, quoted) {
			return len(quoted)
		}
		return 0
	}
	n := len(name) + 2
	if len(b) < n || b[0] != '"' || b[n-1] != '"' || string(b[1:n-1]) != name {
		return 0
	}
	return n
}
