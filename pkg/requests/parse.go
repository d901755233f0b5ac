package requests

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Body formats, as the parser plugins name them (scheduling.Parser.Format).
const (
	// FormatOpenAI is the OpenAI-compatible JSON format (GIE's
	// openai-parser), which also covers Anthropic /v1/messages.
	FormatOpenAI = "openai"
	// FormatPassthrough reads nothing from the body (GIE's
	// passthrough-parser).
	FormatPassthrough = "passthrough"
)

// MaxOutputTokensLimit is the largest MaxOutputTokens Parse reports:
// larger values (up to any JSON number) are clamped to it.
const MaxOutputTokensLimit = math.MaxInt32

// maxTokenID is the largest token id a prompt of token ids may hold.
const maxTokenID = math.MaxUint32

// Parsed is what a request body tells the scheduler.
type Parsed struct {
	// API is the API the body was parsed as: the API given to Parse,
	// except that APIUnknown is parsed (and reported) as APICompletions.
	API API
	// Model is the top-level "model" string.
	Model string
	// Prompt holds Text (the bytes prefix-cache plugins hash), Messages
	// (for conversations) and CacheSalt. See the package documentation for
	// what Text holds for each API and when it aliases the body.
	Prompt scheduling.Prompt
	// PromptTokens is a tokenizer-free estimate of the prompt's tokens:
	// max(1, (len(Prompt.Text)+2)/4), i.e. bytes/4 rounded to nearest.
	PromptTokens int
	// MaxOutputTokens is the first present of max_completion_tokens,
	// max_tokens and max_output_tokens, clamped to MaxOutputTokensLimit; 0
	// when none is given.
	MaxOutputTokens int
	// Stream is the "stream" flag.
	Stream bool
	// IncludeUsage is stream_options.include_usage. (Responses API and
	// Anthropic streams report usage whether or not it is set.)
	IncludeUsage bool
}

// fields are the raw values of the top-level members Parse reads (nil when
// absent; the last of duplicate keys wins, as in encoding/json).
type fields struct {
	model, prompt, input, messages, items, system, instructions, tools []byte
	stream, streamOptions, cacheSalt                                   []byte
	maxCompletionTokens, maxTokens, maxOutputTokens                    []byte
	// Chat-template fields that GIE v1.5 decodes, and so type-checks.
	documents, chatTemplate, chatTemplateKwargs                   []byte
	returnAssistantTokensMask, continueFinalMessage, addGenPrompt []byte
}

// collect fills f from the members of the top-level object obj.
func (f *fields) collect(obj []byte) bool {
	m := objectMembers(obj)
	var buf [64]byte
	for {
		key, v, ok := m.nextDecoded(&buf)
		if !ok {
			break
		}
		switch string(key) {
		case "model":
			f.model = v
		case "prompt":
			f.prompt = v
		case "input":
			f.input = v
		case "messages":
			f.messages = v
		case "items":
			f.items = v
		case "system":
			f.system = v
		case "instructions":
			f.instructions = v
		case "tools":
			f.tools = v
		case "stream":
			f.stream = v
		case "stream_options":
			f.streamOptions = v
		case "cache_salt":
			f.cacheSalt = v
		case "max_completion_tokens":
			f.maxCompletionTokens = v
		case "max_tokens":
			f.maxTokens = v
		case "max_output_tokens":
			f.maxOutputTokens = v
		case "documents":
			f.documents = v
		case "chat_template":
			f.chatTemplate = v
		case "chat_template_kwargs":
			f.chatTemplateKwargs = v
		case "return_assistant_tokens_mask":
			f.returnAssistantTokensMask = v
		case "continue_final_message":
			f.continueFinalMessage = v
		case "add_generation_prompt":
			f.addGenPrompt = v
		}
	}
	return !m.bad
}

// Parse parses a request body of the given format ("openai", the
// default when empty, or "passthrough") for the given API into out, which
// it overwrites. It returns an *Error for every problem with the body, and
// ErrUnknownFormat (wrapped) for a format it does not know.
//
// The passthrough format reads nothing: out gets only API (as given) and
// Parse never fails. The openai format validates the body as the package
// documentation describes and fills every field of out.
//
// out must not be nil. out.Prompt.Text may alias body (see the package
// documentation): the caller must keep body alive and unmodified while out
// is in use. Parse keeps no other reference to body and is safe for
// concurrent use.
func Parse(format string, api API, body []byte, out *Parsed) error {
	*out = Parsed{API: api}
	switch format {
	case FormatPassthrough:
		return nil
	case FormatOpenAI, "":
	default:
		return fmt.Errorf("%w %q", ErrUnknownFormat, format)
	}
	if api == APIUnknown || api >= numAPIs {
		api = APICompletions
	}
	out.API = api
	if err := parseOpenAI(api, body, out); err != nil {
		*out = Parsed{API: api}
		return err
	}
	return nil
}

// parseOpenAI validates and reads an openai-format body.
func parseOpenAI(api API, body []byte, out *Parsed) error {
	obj, err := topObject(body)
	if err != nil {
		return err
	}
	var f fields
	if !f.collect(obj) {
		return errInvalidJSON()
	}
	// 1. The model.
	if err := parseModel(f.model, out); err != nil {
		return err
	}
	// 2. The prompt material the API requires.
	var perr *Error
	switch api {
	case APICompletions:
		perr = parsePromptLike(f.prompt, "prompt", out)
	case APIEmbeddings:
		perr = parsePromptLike(f.input, "input", out)
	case APIChatCompletions:
		perr = parseMessages(&f, partsChat, out)
	case APIResponses:
		perr = parseResponses(&f, out)
	case APIConversations:
		perr = parseConversations(&f, out)
	case APIMessages:
		perr = parseMessages(&f, partsAnthropic, out)
	}
	if perr != nil {
		return perr
	}
	out.PromptTokens = max(1, (len(out.Prompt.Text)+2)/4)
	// 3. The optional fields.
	return parseOptions(api, &f, out)
}

// topObject checks that body is one JSON object and returns it.
func topObject(body []byte) ([]byte, error) {
	if len(bytes.TrimLeft(body, " \t\r\n")) == 0 {
		return nil, &Error{Message: "body is empty"}
	}
	if !validJSON(body) {
		return nil, syntaxError(body)
	}
	// Valid JSON: the value starts after the white space, and the object
	// reader stops at its closing brace.
	obj := body[skipWS(body, 0):]
	if obj[0] != '{' {
		return nil, &Error{Message: "body must be a JSON object, got " + kindName(kindOf(obj))}
	}
	return obj, nil
}

// syntaxError describes why body is not JSON, with the byte offset
// encoding/json reports. Only called for invalid bodies.
func syntaxError(body []byte) *Error {
	var discard struct{}
	err := json.Unmarshal(body, &discard)
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		// Offset counts the bytes read, the offending one included; report
		// that byte's 0-based offset (the body's length for a truncated body).
		off := se.Offset
		if off > 0 && off <= int64(len(body)) && se.Error() != "unexpected end of JSON input" {
			off--
		}
		return &Error{Message: fmt.Sprintf("body is not valid JSON: %s (at byte offset %d)", se.Error(), off)}
	}
	if err != nil {
		return &Error{Message: "body is not valid JSON: " + err.Error()}
	}
	return errInvalidJSON()
}

// parseModel reads the required, non-empty model string.
func parseModel(v []byte, out *Parsed) *Error {
	if len(v) == 0 {
		// As GIE's "model not found in request body", with the field.
		return &Error{Field: "model", Message: msgRequired}
	}
	if kindOf(v) != kindString {
		return typeErr("model", msgString, v)
	}
	inner, esc := stringContent(v)
	if len(inner) == 0 {
		return &Error{Field: "model", Message: "must not be empty"}
	}
	if esc {
		out.Model = string(appendUnescaped(make([]byte, 0, len(inner)), inner))
	} else {
		out.Model = string(inner)
	}
	return nil
}

// parsePromptLike reads a completions prompt or an embeddings input: a
// non-empty string, or a non-empty array of strings, of token ids, or of
// non-empty arrays of token ids.
func parsePromptLike(v []byte, name string, out *Parsed) *Error {
	p := root(name)
	switch kindOf(v) {
	case kindInvalid:
		return p.err(msgRequired)
	case kindString:
		text := decodeString(v)
		if len(text) == 0 {
			return p.err("must not be empty")
		}
		out.Prompt.Text = text
		return nil
	case kindArray:
	default:
		return p.typeErr("must be a string or an array of strings or token ids", v)
	}
	it := arrayElements(v)
	first, ok := it.next()
	if !ok {
		if it.bad {
			return errInvalidJSON()
		}
		return p.err("must not be empty")
	}
	switch kindOf(first) {
	case kindString:
		return promptStrings(v, p, out)
	case kindNumber:
		text, err := appendTokenIDs(nil, v, p)
		if err != nil {
			return err
		}
		out.Prompt.Text = text
		return nil
	case kindArray:
		var text []byte
		it := arrayElements(v)
		for i := 0; ; i++ {
			el, ok := it.next()
			if !ok {
				break
			}
			if kindOf(el) != kindArray {
				return p.idx(i).typeErr("must be an array of token ids, like "+name+"[0]", el)
			}
			n := len(text)
			var err *Error
			if text, err = appendTokenIDs(text, el, p.idx(i)); err != nil {
				return err
			}
			if len(text) == n {
				return p.idx(i).err("must not be empty")
			}
		}
		if it.bad {
			return errInvalidJSON()
		}
		out.Prompt.Text = text
		return nil
	}
	return p.idx(0).typeErr("must be a string, a token id or an array of token ids", first)
}

// promptStrings reads an array of strings. A single string is kept as it
// is (aliasing the body when unescaped); several are joined with 0x00.
func promptStrings(v []byte, p fpath, out *Parsed) *Error {
	it := arrayElements(v)
	var text []byte
	var only []byte
	for i := 0; ; i++ {
		el, ok := it.next()
		if !ok {
			break
		}
		if kindOf(el) != kindString {
			return p.idx(i).typeErr("must be a string, like "+p.String()+"[0]", el)
		}
		switch i {
		case 0:
			only = el
		case 1:
			text = make([]byte, 0, len(v))
			text = appendString(text, only)
			fallthrough
		default:
			text = append(text, entrySep)
			text = appendString(text, el)
		}
	}
	if it.bad {
		return errInvalidJSON()
	}
	if text == nil {
		text = decodeString(only)
	}
	out.Prompt.Text = text
	return nil
}

// appendTokenIDs appends the token ids of the array v, each as 4 bytes
// little-endian.
func appendTokenIDs(dst, v []byte, p fpath) ([]byte, *Error) {
	it := arrayElements(v)
	for i := 0; ; i++ {
		el, ok := it.next()
		if !ok {
			break
		}
		n, res := parseInteger(el, math.MaxInt64)
		if res != intOK || n > maxTokenID {
			return nil, p.idx(i).err("must be an integer token id in [0, " + strconv.Itoa(maxTokenID) + "], got " + string(truncate(el)))
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	}
	if it.bad {
		return nil, errInvalidJSON()
	}
	return dst, nil
}

// truncate shortens a raw value quoted in an error message.
func truncate(v []byte) []byte {
	if len(v) > 32 {
		return append(v[:32:32], "..."...)
	}
	return v
}

// parseMessages reads chat completions messages (mode partsChat) or an
// Anthropic Messages request (mode partsAnthropic): tools, Anthropic's
// system (a string or text blocks), then the messages.
func parseMessages(f *fields, mode partMode, out *Parsed) *Error {
	p := root("messages")
	if err := nonEmptyArray(f.messages, p, "message"); err != nil {
		return err
	}
	if err := optionalKind(f.tools, root("tools"), kindArray, msgArray); err != nil {
		return err
	}
	anthropic := mode == partsAnthropic
	var r renderer
	if anthropic {
		r = newRenderer(len(f.messages)+len(f.system), countElements(f.messages)+2)
	} else {
		r = newRenderer(len(f.messages), countElements(f.messages)+1)
	}
	r.tools(f.tools)
	if anthropic && !isNull(f.system) {
		r.beginConst("system")
		if err := r.content(f.system, root("system"), partsSystem, false); err != nil {
			return err
		}
		r.end(true)
	}
	it := arrayElements(f.messages)
	for i := 0; ; i++ {
		msg, ok := it.next()
		if !ok {
			break
		}
		mp := p.idx(i)
		if kindOf(msg) != kindObject {
			return mp.typeErr(msgObject, msg)
		}
		v, ok := pickMembers(msg, "role", "content", "tool_calls", "function_call")
		if !ok {
			return errInvalidJSON()
		}
		role, content, toolCalls, functionCall := v[0], v[1], v[2], v[3]
		if err := requiredString(role, mp.key("role")); err != nil {
			return err
		}
		r.begin(role)
		// Anthropic requires content. Chat allows it null or absent:
		// assistant messages carrying tool_calls, and older clients, send it.
		if err := r.content(content, mp.key("content"), mode, anthropic); err != nil {
			return err
		}
		if !anthropic {
			if err := r.chatCalls(toolCalls, functionCall, mp); err != nil {
				return err
			}
		}
		r.end(true)
	}
	if it.bad {
		return errInvalidJSON()
	}
	r.finish(&out.Prompt)
	return nil
}

// chatCalls checks and renders a chat message's tool_calls and
// function_call.
func (r *renderer) chatCalls(toolCalls, functionCall []byte, mp fpath) *Error {
	if err := optionalKind(toolCalls, mp.key("tool_calls"), kindArray, msgArray); err != nil {
		return err
	}
	if !isNull(toolCalls) {
		r.addPart([]byte("tool_calls"), toolCalls)
	}
	if err := optionalKind(functionCall, mp.key("function_call"), kindObject, msgObject); err != nil {
		return err
	}
	if !isNull(functionCall) {
		r.addPart([]byte("function_call"), functionCall)
	}
	return nil
}

// parseResponses reads a Responses API request: instructions, then input
// (a string, or an array of input items).
func parseResponses(f *fields, out *Parsed) *Error {
	p := root("input")
	switch kindOf(f.input) {
	case kindInvalid:
		return p.err(msgRequired)
	case kindString, kindArray:
	default:
		return p.typeErr("must be a string or an array of input items", f.input)
	}
	if err := optionalKind(f.instructions, root("instructions"), kindString, msgString); err != nil {
		return err
	}
	if err := optionalKind(f.tools, root("tools"), kindArray, msgArray); err != nil {
		return err
	}
	n := 3
	if kindOf(f.input) == kindArray {
		n += countElements(f.input)
	}
	r := newRenderer(len(f.input)+len(f.instructions), n)
	r.tools(f.tools)
	if kindOf(f.instructions) == kindString {
		r.beginConst("system")
		r.addText(f.instructions)
		r.end(true)
	}
	if kindOf(f.input) == kindString {
		r.beginConst("user")
		r.addText(f.input)
		r.end(true)
	} else if err := r.items(f.input, p); err != nil {
		return err
	}
	r.finish(&out.Prompt)
	return nil
}

// parseConversations reads a Conversations API request: a non-empty
// array of items.
func parseConversations(f *fields, out *Parsed) *Error {
	p := root("items")
	if err := nonEmptyArray(f.items, p, "item"); err != nil {
		return err
	}
	r := newRenderer(len(f.items), countElements(f.items))
	if err := r.items(f.items, p); err != nil {
		return err
	}
	r.finish(&out.Prompt)
	return nil
}

// items renders Responses/Conversations items. An item with a role is a
// message (its content a string or an array of parts); any other item
// (function_call, function_call_output, reasoning, ...) is an entry named
// by its type holding a placeholder of the whole item.
func (r *renderer) items(v []byte, p fpath) *Error {
	it := arrayElements(v)
	for i := 0; ; i++ {
		item, ok := it.next()
		if !ok {
			break
		}
		ip := p.idx(i)
		if kindOf(item) != kindObject {
			return ip.typeErr(msgObject, item)
		}
		v, ok := pickMembers(item, "type", "role", "content")
		if !ok {
			return errInvalidJSON()
		}
		typ, role, content := v[0], v[1], v[2]
		if err := optionalKind(typ, ip.key("type"), kindString, msgString); err != nil {
			return err
		}
		if err := optionalKind(role, ip.key("role"), kindString, msgString); err != nil {
			return err
		}
		if !isNull(role) {
			r.begin(role)
			if err := r.content(content, ip.key("content"), partsResponses, false); err != nil {
				return err
			}
			r.end(true)
			continue
		}
		name := []byte("item")
		if !isNull(typ) {
			name = decodeString(typ)
		}
		r.beginConst("item")
		r.addPart(name, item)
		r.end(false)
	}
	if it.bad {
		return errInvalidJSON()
	}
	return nil
}

// parseOptions reads and type-checks the optional fields.
func parseOptions(api API, f *fields, out *Parsed) error {
	if err := optionalKind(f.stream, root("stream"), kindBool, msgBool); err != nil {
		return err
	}
	out.Stream = string(f.stream) == "true"
	if err := optionalKind(f.streamOptions, root("stream_options"), kindObject, msgObject); err != nil {
		return err
	}
	if kindOf(f.streamOptions) == kindObject {
		iu := member(f.streamOptions, "include_usage")
		if err := optionalKind(iu, root("stream_options").key("include_usage"), kindBool, msgBool); err != nil {
			return err
		}
		out.IncludeUsage = string(iu) == "true"
	}
	if err := optionalKind(f.cacheSalt, root("cache_salt"), kindString, msgString); err != nil {
		return err
	}
	if kindOf(f.cacheSalt) == kindString {
		out.Prompt.CacheSalt = string(decodeString(f.cacheSalt))
	}
	set := false
	for _, mt := range [...]struct {
		name string
		v    []byte
	}{
		{"max_completion_tokens", f.maxCompletionTokens},
		{"max_tokens", f.maxTokens},
		{"max_output_tokens", f.maxOutputTokens},
	} {
		if isNull(mt.v) {
			continue
		}
		n, res := parseInteger(mt.v, MaxOutputTokensLimit)
		switch res {
		case intNotInt:
			if kindOf(mt.v) == kindNumber {
				return &Error{Field: mt.name, Message: "must be an integer, got " + string(truncate(mt.v))}
			}
			return typeErr(mt.name, "must be an integer", mt.v)
		case intNegative:
			return &Error{Field: mt.name, Message: "must not be negative, got " + string(truncate(mt.v))}
		}
		if api == APIMessages && mt.name == "max_tokens" && n < 1 {
			return &Error{Field: mt.name, Message: "must be at least 1"}
		}
		if !set {
			out.MaxOutputTokens = int(n)
			set = true
		}
	}
	if api == APIMessages && isNull(f.maxTokens) {
		return &Error{Field: "max_tokens", Message: msgRequired}
	}
	if api == APIChatCompletions {
		for _, c := range [...]struct {
			name, msg string
			v         []byte
			kind      int
		}{
			{"documents", msgArray, f.documents, kindArray},
			{"chat_template", msgString, f.chatTemplate, kindString},
			{"chat_template_kwargs", msgObject, f.chatTemplateKwargs, kindObject},
			{"return_assistant_tokens_mask", msgBool, f.returnAssistantTokensMask, kindBool},
			{"continue_final_message", msgBool, f.continueFinalMessage, kindBool},
			{"add_generation_prompt", msgBool, f.addGenPrompt, kindBool},
		} {
			if err := optionalKind(c.v, root(c.name), c.kind, c.msg); err != nil {
				return err
			}
		}
	}
	return nil
}

// optionalKind checks that an optional value, when present and not
// null, has the given kind.
func optionalKind(v []byte, p fpath, kind int, msg string) *Error {
	if isNull(v) || kindOf(v) == kind {
		return nil
	}
	return p.typeErr(msg, v)
}

// requiredString checks that a required value is a string.
func requiredString(v []byte, p fpath) *Error {
	if len(v) == 0 {
		return p.err(msgRequired)
	}
	if kindOf(v) != kindString {
		return p.typeErr(msgString, v)
	}
	return nil
}

// nonEmptyArray checks that a required value is an array with at least
// one element.
func nonEmptyArray(v []byte, p fpath, what string) *Error {
	if len(v) == 0 {
		return p.err(msgRequired)
	}
	if kindOf(v) != kindArray {
		return p.typeErr("must be an array of "+what+"s", v)
	}
	it := arrayElements(v)
	if _, ok := it.next(); !ok {
		if it.bad {
			return errInvalidJSON()
		}
		return p.err("must contain at least one " + what)
	}
	return nil
}

// typeErr builds "must be X, got Y" for a top-level field.
func typeErr(field, want string, v []byte) *Error {
	return &Error{Field: field, Message: want + ", got " + kindName(kindOf(v))}
}
