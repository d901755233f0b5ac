package requests

import "slices"

// MaxCacheBreakpoints is the number of cache_control breakpoints the
// Anthropic Messages API accepts in one request.
const MaxCacheBreakpoints = 4

// ephemeral is the breakpoint InjectCacheControl adds (the default
// five-minute cache).
const ephemeral = `{"type":"ephemeral"}`

// InjectCacheControl adds prompt-caching breakpoints,
// cache_control {"type":"ephemeral"}, to a native Anthropic /v1/messages
// body (C-18), so that the provider caches the request's stable prefix:
// Anthropic renders tools, then system, then messages, and caches
// everything up to a breakpoint.
//
// Eligible places, in the order they are filled:
//   - the last system block: a system given as a string becomes one text
//     block carrying the breakpoint; an array's last block gets it. It
//     covers tools and system.
//   - the last tools entry: with a system prompt too, a change of system
//     keeps the tools cached; without one, it is the end of the stable
//     prefix.
//
// Blocks the client wrote are kept: a block that already has a
// cache_control member is left as it is (and counts as filled), nothing
// is added beyond MaxCacheBreakpoints in total (the client's count,
// including the breakpoints inside content blocks such as a tool_result's
// content array), and nothing at all is added when the client uses
// automatic caching (a top-level cache_control) or gives any breakpoint,
// nested ones included, a ttl (Anthropic requires longer-lived
// breakpoints to come first, which an added five-minute one could
// break). A body whose tools or system are duplicated or not of the
// documented kind, or that is not a well-formed object, is returned
// unchanged.
//
// It returns the new body (a splice: every other byte is kept) and the
// number of breakpoints added; body itself when it added none.
func InjectCacheControl(body []byte) ([]byte, int) {
	base := skipWS(body, 0)
	if base >= len(body) || body[base] != '{' {
		return body, 0
	}
	obj := body[base:]
	var tools, system, messages [2]int // value spans in obj; 0,0 when absent
	var nTools, nSystem, nMessages int
	m := objectMembers(obj)
	for {
		key, esc, vs, ve, ok := m.next()
		if !ok {
			break
		}
		switch {
		case keyIs(key, esc, "tools"):
			tools, nTools = [2]int{vs, ve}, nTools+1
		case keyIs(key, esc, "system"):
			system, nSystem = [2]int{vs, ve}, nSystem+1
		case keyIs(key, esc, "messages"):
			messages, nMessages = [2]int{vs, ve}, nMessages+1
		case keyIs(key, esc, "cache_control"):
			if !isNull(obj[vs:ve]) {
				return body, 0 // automatic caching: the provider places it
			}
		}
	}
	if m.bad || nTools > 1 || nSystem > 1 || nMessages > 1 {
		return body, 0
	}
	// Count the client's breakpoints.
	used := 0
	for _, span := range [...][2]int{tools, system} {
		if span[1] == 0 || obj[span[0]] != '[' {
			continue
		}
		n, ok := countBreakpoints(obj[span[0]:span[1]])
		if !ok {
			return body, 0
		}
		used += n
	}
	if messages[1] != 0 && obj[messages[0]] == '[' {
		e := arrayElements(obj[messages[0]:messages[1]])
		for {
			msg, ok := e.next()
			if !ok {
				break
			}
			content := member(msg, "content")
			if len(content) == 0 || content[0] != '[' {
				continue
			}
			n, ok := countBreakpoints(content)
			if !ok {
				return body, 0
			}
			used += n
		}
		if e.bad {
			return body, 0
		}
	}
	budget := MaxCacheBreakpoints - used
	if budget <= 0 {
		return body, 0
	}

	type splice struct {
		at, end int // replace obj[at:end] (at == end: insert)
		with    string
	}
	var edits [2]splice
	ne := 0
	// The system prompt's breakpoint first: it covers tools as well.
	if system[1] != 0 {
		v := obj[system[0]:system[1]]
		switch kindOf(v) {
		case kindString:
			if len(v) > 2 { // not ""
				edits[ne] = splice{at: system[0], end: system[1],
					with: `[{"type":"text","text":` + string(v) + `,"cache_control":` + ephemeral + `}]`}
				ne++
				budget--
			}
		case kindArray:
			if last, lastEnd, any := lastElement(v); any {
				if at, with, ok := insertMember(v[last:lastEnd]); ok {
					edits[ne] = splice{at: system[0] + last + at, end: system[0] + last + at, with: with}
					ne++
					budget--
				}
			}
		}
	}
	if tools[1] != 0 && budget > 0 && kindOf(obj[tools[0]:tools[1]]) == kindArray {
		v := obj[tools[0]:tools[1]]
		if last, lastEnd, any := lastElement(v); any {
			if at, with, ok := insertMember(v[last:lastEnd]); ok {
				edits[ne] = splice{at: tools[0] + last + at, end: tools[0] + last + at, with: with}
				ne++
			}
		}
	}
	if ne == 0 {
		return body, 0
	}
	ed := edits[:ne]
	slices.SortFunc(ed, func(a, b splice) int { return a.at - b.at })
	grow := 0
	for _, s := range ed {
		grow += len(s.with) - (s.end - s.at)
	}
	out := make([]byte, 0, len(body)+grow)
	out = append(out, body[:base]...)
	last := 0
	for _, s := range ed {
		out = append(out, obj[last:s.at]...)
		out = append(out, s.with...)
		last = s.end
	}
	out = append(out, obj[last:]...)
	return out, ne
}

// maxBlockNesting bounds how deep countBreakpoints follows content arrays
// inside content blocks (a tool_result's content is one level).
const maxBlockNesting = 4

// countBreakpoints counts the elements of the array v that carry a
// non-null cache_control member, and those inside the content arrays of
// its elements (a tool_result's content blocks carry breakpoints too,
// and Anthropic counts them). ok is false when v is malformed, nested
// deeper than maxBlockNesting, or a breakpoint anywhere in it has a ttl
// (InjectCacheControl then adds nothing).
func countBreakpoints(v []byte) (n int, ok bool) {
	return countBreakpointsAt(v, 0)
}

func countBreakpointsAt(v []byte, depth int) (n int, ok bool) {
	if depth > maxBlockNesting {
		return 0, false
	}
	e := arrayElements(v)
	for {
		el, more := e.next()
		if !more {
			break
		}
		if len(el) == 0 || el[0] != '{' {
			continue
		}
		if content := member(el, "content"); len(content) > 0 && content[0] == '[' {
			c, ok := countBreakpointsAt(content, depth+1)
			if !ok {
				return n, false
			}
			n += c
		}
		cc := member(el, "cache_control")
		if len(cc) == 0 || isNull(cc) {
			continue
		}
		if cc[0] == '{' && member(cc, "ttl") != nil {
			return n, false
		}
		n++
	}
	return n, !e.bad
}

// lastElement returns the span [start, end) in the array v of its last
// element, and whether it has one.
func lastElement(v []byte) (start, end int, ok bool) {
	e := arrayElements(v)
	for {
		i, more := e.advance(']')
		if !more {
			break
		}
		j := skipValue(e.b, i)
		if j < 0 {
			return 0, 0, false
		}
		e.i = j
		start, end, ok = i, j, true
	}
	if e.bad {
		return 0, 0, false
	}
	return start, end, ok
}

// insertMember returns where, in the object o, to insert a cache_control
// member and what to insert; ok is false when o is not an object or
// already has a cache_control member (the client's, kept as written, even
// null).
func insertMember(o []byte) (at int, with string, ok bool) {
	if len(o) < 2 || o[0] != '{' || o[len(o)-1] != '}' {
		return 0, "", false
	}
	m := objectMembers(o)
	n := 0
	for {
		key, esc, _, _, more := m.next()
		if !more {
			break
		}
		if keyIs(key, esc, "cache_control") {
			return 0, "", false
		}
		n++
	}
	if m.bad {
		return 0, "", false
	}
	at = len(o) - 1
	if n == 0 {
		return at, `"cache_control":` + ephemeral, true
	}
	return at, `,"cache_control":` + ephemeral, true
}
