package requests

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzBodies seed the body fuzzers.
var fuzzBodies = []string{
	`{"model":"m","prompt":"hello"}`,
	`{"model":"m","prompt":["a","b\n"],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"m","prompt":[[1,2],[3]]}`,
	`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}],"tools":[{"type":"function"}]}`,
	`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},{"type":"function_call","name":"f"}],"instructions":"i"}`,
	`{"model":"m","items":[{"type":"message","role":"user","content":"hi"}]}`,
	`{"model":"c","max_tokens":9,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x"}]}]}`,
	`{"mod\u0065l":"\u6a21","prompt":"\ud83d\ude00\\"}`,
	`{"model":"a","model":"b","metadata":{"model":"c"}}`,
	` [1] `, `{"model":`, ``, `null`, `{"model":"m","prompt":[4294967296]}`,
}

// decodeTop decodes a JSON object's members with encoding/json.
func decodeTop(body []byte) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

func FuzzParse(f *testing.F) {
	for i, b := range fuzzBodies {
		f.Add(uint8(i%int(numAPIs+1)), []byte(b))
	}
	f.Fuzz(func(t *testing.T, apiByte uint8, body []byte) {
		api := API(apiByte % uint8(numAPIs+1))
		orig := bytes.Clone(body)
		var p Parsed
		err := Parse(FormatOpenAI, api, body, &p)
		if !bytes.Equal(body, orig) {
			t.Fatalf("Parse modified the body")
		}
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse error %v is %T, not *Error", err, err)
			}
			if pe.Message == "" {
				t.Fatalf("empty error message")
			}
			if !json.Valid(body) && pe.Field != "" {
				t.Fatalf("invalid JSON reported at field %q: %v", pe.Field, err)
			}
			if p.Model != "" || p.Prompt.Text != nil || p.Prompt.Messages != nil {
				t.Fatalf("out not reset after an error: %+v", p)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		top, ok := decodeTop(body)
		if !ok {
			t.Fatalf("accepted a body that is not a JSON object: %q", body)
		}
		if p.PromptTokens != max(1, (len(p.Prompt.Text)+2)/4) {
			t.Fatalf("PromptTokens %d for %d bytes", p.PromptTokens, len(p.Prompt.Text))
		}
		// Text either lies wholly inside body or does not touch it.
		if len(p.Prompt.Text) > 0 {
			for i := range body {
				if &body[i] == &p.Prompt.Text[0] && i+len(p.Prompt.Text) > len(body) {
					t.Fatalf("Text runs past the body")
				}
			}
		}
		for _, m := range p.Prompt.Messages {
			if !bytes.Contains(p.Prompt.Text, []byte(m.Content)) || !bytes.Contains(p.Prompt.Text, []byte(m.Role)) {
				t.Fatalf("message %+v is not in Text %q", m, p.Prompt.Text)
			}
		}
		if !utf8.Valid(body) {
			return // encoding/json replaces invalid UTF-8; we keep it
		}
		var model string
		if err := json.Unmarshal(top["model"], &model); err != nil || model != p.Model {
			t.Fatalf("Model = %q, encoding/json reads %q (%v)", p.Model, model, err)
		}
		switch p.API {
		case APICompletions, APIEmbeddings:
			key := "prompt"
			if p.API == APIEmbeddings {
				key = "input"
			}
			var s string
			if json.Unmarshal(top[key], &s) == nil && string(p.Prompt.Text) != s {
				t.Fatalf("Text = %q, encoding/json reads %q", p.Prompt.Text, s)
			}
			var ss []string
			if json.Unmarshal(top[key], &ss) == nil && string(p.Prompt.Text) != strings.Join(ss, "\x00") {
				t.Fatalf("Text = %q, encoding/json reads %q", p.Prompt.Text, ss)
			}
		case APIChatCompletions, APIMessages:
			var msgs []json.RawMessage
			if err := json.Unmarshal(top["messages"], &msgs); err != nil {
				t.Fatalf("accepted messages encoding/json cannot read: %v", err)
			}
			n := len(msgs)
			if p.API == APIMessages && top["system"] != nil && string(top["system"]) != "null" {
				n++
			}
			if len(p.Prompt.Messages) != n {
				t.Fatalf("%d Messages for %d messages", len(p.Prompt.Messages), n)
			}
		}
	})
}

func FuzzRewriteModel(f *testing.F) {
	for _, b := range fuzzBodies {
		f.Add([]byte(b), "new-model")
	}
	f.Add([]byte(`{"model":"a\"b","x":{"model":"y"}}`), "q\"\\\u2028\xff")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		orig := bytes.Clone(body)
		out, err := RewriteModel(body, model)
		if !bytes.Equal(body, orig) {
			t.Fatalf("RewriteModel modified the body")
		}
		top, ok := decodeTop(body)
		if !ok || top["model"] == nil {
			return // only valid objects with a model are promised anything
		}
		if err != nil {
			t.Fatalf("RewriteModel(%q) = %v", body, err)
		}
		got, ok := decodeTop(out)
		if !ok {
			t.Fatalf("result %q is not a JSON object", out)
		}
		var name string
		if err := json.Unmarshal(got["model"], &name); err != nil {
			t.Fatalf("model in %q is not a string: %v", out, err)
		}
		var want string
		quoted, _ := json.Marshal(model)
		_ = json.Unmarshal(quoted, &want)
		if name != want {
			t.Fatalf("model = %q, want %q", name, want)
		}
		delete(top, "model")
		delete(got, "model")
		if len(top) != len(got) {
			t.Fatalf("keys changed: %d -> %d", len(top), len(got))
		}
		for k, v := range top {
			var a, b any
			_ = json.Unmarshal(v, &a)
			_ = json.Unmarshal(got[k], &b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("key %q changed: %s -> %s", k, v, got[k])
			}
		}
	})
}

func FuzzSSEScanner(f *testing.F) {
	for _, s := range []string{sseOpenAI, sseOpenAICRLF, sseResponses, sseAnthropic, "data: [DONE]\n", "data: {\"usage\":{\"input_tokens\":1,\"cache_read_input_tokens\":2}}\n"} {
		f.Add([]byte(s), uint16(len(s)/3), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, stream []byte, a, b uint16) {
		var whole SSEScanner
		whole.Feed(stream)
		wantU, wantOK := whole.Usage()
		i, j := int(a)%(len(stream)+1), int(b)%(len(stream)+1)
		if i > j {
			i, j = j, i
		}
		var split SSEScanner
		split.Feed(stream[:i])
		split.Feed(stream[i:j])
		split.Feed(stream[j:])
		if u, ok := split.Usage(); u != wantU || ok != wantOK || split.Done() != whole.Done() {
			t.Fatalf("split at %d,%d: %+v %v %v; whole: %+v %v %v", i, j, u, ok, split.Done(), wantU, wantOK, whole.Done())
		}
		if len(stream) <= 4096 {
			var bytewise SSEScanner
			for k := range stream {
				bytewise.Feed(stream[k : k+1])
			}
			if u, ok := bytewise.Usage(); u != wantU || ok != wantOK || bytewise.Done() != whole.Done() {
				t.Fatalf("bytewise: %+v %v; whole: %+v %v", u, ok, wantU, wantOK)
			}
		}
	})
}

func FuzzParseUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`))
	f.Add([]byte(`{"type":"message","usage":{"input_tokens":1,"cache_read_input_tokens":2,"output_tokens":3}}`))
	f.Add([]byte(`{"object":"response","usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3,"input_tokens_details":{"cached_tokens":0}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		u, ok := ParseUsage(body)
		if ok && !json.Valid(body) {
			t.Fatalf("usage %+v from invalid JSON", u)
		}
		if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0 || u.CachedTokens < 0 {
			t.Fatalf("negative count %+v", u)
		}
	})
}

// FuzzJSONString checks the string decoder and encoder against
// encoding/json.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{`plain`, `a\nb\u00e9\ud83d\ude00`, `\ud800`, `\\\"`, "x\xff", "\u2028<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// s as raw string content.
		var want string
		if utf8.ValidString(s) && json.Unmarshal([]byte(`"`+s+`"`), &want) == nil {
			if got := appendUnescaped(nil, []byte(s)); string(got) != want {
				t.Fatalf("appendUnescaped(%q) = %q, want %q", s, got, want)
			}
			end, _ := stringEnd([]byte(`"`+s+`"x`), 0)
			if end != len(s)+2 {
				t.Fatalf("stringEnd(%q) = %d, want %d", s, end, len(s)+2)
			}
		}
		// s as text to quote.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		quoted := appendQuoted(nil, s)
		if string(quoted) != strings.TrimSuffix(buf.String(), "\n") {
			t.Fatalf("appendQuoted(%q) = %s, encoding/json %s", s, quoted, buf.String())
		}
		if needsQuoting(s) != (string(quoted) != `"`+s+`"`) {
			t.Fatalf("needsQuoting(%q) = %v", s, needsQuoting(s))
		}
	})
}

// FuzzValid checks that validJSON agrees with encoding/json.Valid.
func FuzzValid(f *testing.F) {
	for _, b := range fuzzBodies {
		f.Add([]byte(b))
	}
	for _, s := range []string{`-0.5e+3`, `01`, `1.`, `.5`, `"\u12g4"`, "\"\x1f\"", `[1,]`, `{"a":1,}`, `{"a" 1}`, `truex`, `[[[]]]`, ` {} `, `"\/"`, `1e`, `-`, `"` + strings.Repeat("a", 20) + `\"` + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}
