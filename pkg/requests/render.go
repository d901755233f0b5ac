package requests

import (
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Canonical rendering of a conversation (chat messages, Anthropic
// messages, Responses input items, Conversations items) into Prompt.Text.
// See doc.go for the format; the bytes of one entry depend on that entry
// alone, so a conversation that grows by appending messages keeps its
// earlier rendering as a byte prefix.
const (
	// entrySep ends an entry's role and the entry itself.
	entrySep = 0x00
	// partSep joins the text parts of one entry.
	partSep = '\n'
	// placeholderMark starts the placeholder of a non-text part.
	placeholderMark = 0x1a
)

// entry is one rendered entry, located in the text buffer.
type entry struct {
	// role is an interned role name; "" means text[roleStart:roleEnd].
	role               string
	roleStart, roleEnd int
	// start and end delimit the entry's text (its Message.Content).
	start, end int
	// message says the entry is listed in Prompt.Messages.
	message bool
}

// pendingPart is a non-text part, rendered after the entry's text.
type pendingPart struct {
	typ    []byte
	digest uint64
}

// renderer builds Prompt.Text and Prompt.Messages for conversations.
type renderer struct {
	text    []byte
	entries []entry
	pending []pendingPart
	cur     entry
	nText   int
}

// newRenderer returns a renderer whose buffer holds sizeHint bytes and
// whose entry list holds entries entries before growing.
func newRenderer(sizeHint, entries int) renderer {
	return renderer{text: make([]byte, 0, sizeHint+64), entries: make([]entry, 0, entries)}
}

// countElements returns the number of elements of the array v.
func countElements(v []byte) int {
	n := 0
	it := arrayElements(v)
	for {
		if _, ok := it.next(); !ok {
			return n
		}
		n++
	}
}

// internRole returns a constant for the common roles, so Messages need no
// string of their own for them.
func internRole(b []byte) string {
	switch string(b) {
	case "user":
		return "user"
	case "assistant":
		return "assistant"
	case "system":
		return "system"
	case "developer":
		return "developer"
	case "tool":
		return "tool"
	case "function":
		return "function"
	}
	return ""
}

// begin starts an entry whose role is the JSON string value role.
func (r *renderer) begin(role []byte) {
	start := len(r.text)
	r.text = appendString(r.text, role)
	r.cur = entry{role: internRole(r.text[start:]), roleStart: start, roleEnd: len(r.text)}
	r.text = append(r.text, entrySep)
	r.cur.start = len(r.text)
	r.nText = 0
}

// beginConst starts an entry with a constant role.
func (r *renderer) beginConst(role string) {
	r.text = append(r.text, role...)
	r.cur = entry{role: role}
	r.text = append(r.text, entrySep)
	r.cur.start = len(r.text)
	r.nText = 0
}

// addText appends the JSON string value v as a text part.
func (r *renderer) addText(v []byte) {
	if r.nText > 0 {
		r.text = append(r.text, partSep)
	}
	r.text = appendString(r.text, v)
	r.nText++
}

// addPart records a non-text part of type typ (raw string content) whose
// JSON value is raw.
func (r *renderer) addPart(typ, raw []byte) {
	r.pending = append(r.pending, pendingPart{typ: typ, digest: digestValue(raw)})
}

// end finishes the current entry.
func (r *renderer) end(message bool) {
	r.cur.end = len(r.text)
	r.cur.message = message
	for _, p := range r.pending {
		r.text = append(r.text, placeholderMark)
		r.text = append(r.text, p.typ...)
		r.text = append(r.text, '#')
		for shift := 60; shift >= 0; shift -= 4 {
			r.text = append(r.text, hexDigits[p.digest>>uint(shift)&0xf])
		}
	}
	r.pending = r.pending[:0]
	r.text = append(r.text, entrySep)
	r.entries = append(r.entries, r.cur)
}

// tools renders a tools definition as the first entry, when it is a
// non-empty array.
func (r *renderer) tools(v []byte) {
	if kindOf(v) != kindArray {
		return
	}
	it := arrayElements(v)
	if _, ok := it.next(); !ok {
		return
	}
	r.beginConst("tools")
	r.addPart([]byte("tools"), v)
	r.end(false)
}

// finish stores the rendering in p.
func (r *renderer) finish(p *scheduling.Prompt) {
	p.Text = r.text
	n := 0
	for i := range r.entries {
		if r.entries[i].message {
			n++
		}
	}
	if n == 0 {
		return
	}
	// The rendering as a string without copying it (a 200 KB prompt would
	// cost another 200 KB): every Content and every uncommon Role is a
	// substring of it. Safe because r.text is never written again: the
	// renderer ends here and Prompt.Text is read-only (an append by a
	// plugin would write past len, outside every substring).
	all := unsafe.String(unsafe.SliceData(r.text), len(r.text))
	msgs := make([]scheduling.Message, 0, n)
	for _, e := range r.entries {
		if !e.message {
			continue
		}
		role := e.role
		if role == "" {
			role = all[e.roleStart:e.roleEnd]
		}
		msgs = append(msgs, scheduling.Message{Role: role, Content: all[e.start:e.end]})
	}
	p.Messages = msgs
}

// digestValue hashes a JSON value for a placeholder: its bytes as sent,
// except that members named "cache_control" are left out at any depth, so
// moving Anthropic cache breakpoints between turns keeps earlier
// placeholders (and so the prefix) unchanged.
func digestValue(v []byte) uint64 {
	var d xxhash.Digest
	d.Reset()
	digestInto(&d, v)
	return d.Sum64()
}

func digestInto(d *xxhash.Digest, v []byte) {
	switch kindOf(v) {
	case kindObject:
		_, _ = d.WriteString("{")
		m := objectMembers(v)
		for {
			key, esc, vs, ve, ok := m.next()
			if !ok {
				break
			}
			if keyIs(key, esc, "cache_control") {
				continue
			}
			_, _ = d.Write(key)
			_, _ = d.WriteString(":")
			digestInto(d, v[vs:ve])
			_, _ = d.WriteString(",")
		}
		_, _ = d.WriteString("}")
	case kindArray:
		_, _ = d.WriteString("[")
		it := arrayElements(v)
		for {
			el, ok := it.next()
			if !ok {
				break
			}
			digestInto(d, el)
			_, _ = d.WriteString(",")
		}
		_, _ = d.WriteString("]")
	default:
		_, _ = d.Write(v)
	}
}

// partMode selects which content parts count as text.
type partMode uint8

const (
	// partsChat: OpenAI chat content parts; "text" is text, and the
	// payloads of image_url, input_audio and video_url must be objects.
	partsChat partMode = iota
	// partsResponses: Responses/Conversations parts; "input_text",
	// "output_text" and "text" are text.
	partsResponses
	// partsAnthropic: Anthropic content blocks; "text" is text.
	partsAnthropic
	// partsSystem: Anthropic system blocks, which must all be "text".
	partsSystem
)

// isTextPart reports whether a part of type typ carries its text in a
// "text" member.
func isTextPart(mode partMode, typ []byte) bool {
	switch string(typ) {
	case "text":
		return true
	case "input_text", "output_text":
		return mode == partsResponses
	}
	return false
}

// content renders a message's content: a string, or an array of typed
// parts; null or absent renders nothing unless required.
func (r *renderer) content(v []byte, p fpath, mode partMode, required bool) *Error {
	switch kindOf(v) {
	case kindString:
		r.addText(v)
		return nil
	case kindArray:
		return r.parts(v, p, mode)
	case kindInvalid, kindNull:
		if !required {
			return nil
		}
		if len(v) == 0 {
			return p.err(msgRequired)
		}
	}
	if mode == partsAnthropic || mode == partsSystem {
		return p.typeErr("must be a string or an array of content blocks", v)
	}
	return p.typeErr("must be a string or an array of content parts", v)
}

// mediaKeys name the members of chat content parts that carry media; the
// parser type-checks the one given last.
var mediaKeys = [...]string{"image_url", "input_audio", "video_url"}

// lastGiven returns the index of the value that starts last in the
// object, of which the values are sub-slices as pickMembers returns them,
// or -1 when all are nil. Sub-slices share their object's end, so the one
// starting last has the least capacity.
func lastGiven(vals [][]byte) int {
	last := -1
	for i, v := range vals {
		if v != nil && (last < 0 || cap(v) < cap(vals[last])) {
			last = i
		}
	}
	return last
}

// parts renders an array of content parts.
func (r *renderer) parts(v []byte, p fpath, mode partMode) *Error {
	it := arrayElements(v)
	for j := 0; ; j++ {
		part, ok := it.next()
		if !ok {
			break
		}
		pp := p.idx(j)
		if kindOf(part) != kindObject {
			return pp.typeErr(msgObject, part)
		}
		v, ok := pickMembers(part, "type", "text", mediaKeys[0], mediaKeys[1], mediaKeys[2])
		if !ok {
			return errInvalidJSON()
		}
		typ, text := v[0], v[1]
		if isNull(typ) {
			return pp.key("type").err(msgRequired)
		}
		if kindOf(typ) != kindString {
			return pp.key("type").typeErr(msgString, typ)
		}
		typName := decodeString(typ)
		if mode == partsSystem && string(typName) != "text" {
			return pp.key("type").err(`must be "text"`)
		}
		if isTextPart(mode, typName) {
			if isNull(text) {
				return pp.key("text").err(msgRequired)
			}
			if kindOf(text) != kindString {
				return pp.key("text").typeErr(msgString, text)
			}
			r.addText(text)
			continue
		}
		if mode == partsChat {
			// The media member given last must be an object.
			media := v[2:5]
			if i := lastGiven(media); i >= 0 && !isNull(media[i]) && kindOf(media[i]) != kindObject {
				return pp.key(mediaKeys[i]).typeErr(msgObject, media[i])
			}
		}
		r.addPart(typName, part)
	}
	if it.bad {
		return errInvalidJSON()
	}
	return nil
}

// errInvalidJSON reports JSON the reader could not follow although
// validJSON accepted it (it should not happen), or JSON that RewriteModel
// cannot follow.
func errInvalidJSON() *Error { return &Error{Message: "body is not valid JSON"} }
