package requests

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestC18_InjectCacheControl pins where breakpoints go and that the
// client's are kept.
func TestC18_InjectCacheControl(t *testing.T) {
	const bp = `"cache_control":{"type":"ephemeral"}`
	for _, tc := range []struct {
		name, in, want string
		added          int
	}{
		{"system string",
			`{"model":"claude","system":"You are terse.","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"claude","system":[{"type":"text","text":"You are terse.",` + bp + `}],"messages":[{"role":"user","content":"hi"}]}`, 1},
		{"system blocks: the last one",
			`{"system":[{"type":"text","text":"a"}, {"type":"text","text":"b"} ],"messages":[]}`,
			`{"system":[{"type":"text","text":"a"}, {"type":"text","text":"b",` + bp + `} ],"messages":[]}`, 1},
		{"tools and system",
			`{"tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{"type":"object"}}],"system":"S","messages":[]}`,
			`{"tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{"type":"object"},` + bp + `}],"system":[{"type":"text","text":"S",` + bp + `}],"messages":[]}`, 2},
		{"tools only",
			`{"tools":[{}],"messages":[]}`,
			`{"tools":[{` + bp + `}],"messages":[]}`, 1},
		{"the client's last system block is kept; tools still get one",
			`{"tools":[{"name":"t"}],"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}`,
			`{"tools":[{"name":"t",` + bp + `}],"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}`, 1},
		{"a client null is the client's",
			`{"system":[{"type":"text","text":"a","cache_control":null}]}`,
			`{"system":[{"type":"text","text":"a","cache_control":null}]}`, 0},
		{"budget: three client breakpoints leave one, for system",
			`{"tools":[{"name":"t"}],"system":"S","messages":[{"role":"user","content":[{"type":"text","text":"1","cache_control":{"type":"ephemeral"}},{"type":"text","text":"2","cache_control":{"type":"ephemeral"}},{"type":"text","text":"3","cache_control":{"type":"ephemeral"}}]}]}`,
			`{"tools":[{"name":"t"}],"system":[{"type":"text","text":"S",` + bp + `}],"messages":[{"role":"user","content":[{"type":"text","text":"1","cache_control":{"type":"ephemeral"}},{"type":"text","text":"2","cache_control":{"type":"ephemeral"}},{"type":"text","text":"3","cache_control":{"type":"ephemeral"}}]}]}`, 1},
		{"budget used up",
			`{"system":"S","messages":[{"role":"user","content":[{"cache_control":{"type":"ephemeral"}},{"cache_control":{"type":"ephemeral"}},{"cache_control":{"type":"ephemeral"}},{"cache_control":{"type":"ephemeral"}}]}]}`,
			"", 0},
		{"a ttl anywhere: nothing added",
			`{"system":"S","messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`,
			"", 0},
		{"nested tool_result breakpoints count, and their ttl: nothing added",
			`{"tools":[{"name":"t"}],"system":"S","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"1","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"2","cache_control":{"type":"ephemeral"}},{"type":"text","text":"3","cache_control":{"type":"ephemeral"}},{"type":"text","text":"4","cache_control":{"type":"ephemeral"}}]}]}]}`,
			"", 0},
		{"nested tool_result breakpoints use the budget",
			`{"tools":[{"name":"t"}],"system":"S","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"1","cache_control":{"type":"ephemeral"}},{"type":"text","text":"2","cache_control":{"type":"ephemeral"}}]},{"type":"text","text":"3","cache_control":{"type":"ephemeral"}}]}]}`,
			`{"tools":[{"name":"t"}],"system":[{"type":"text","text":"S",` + bp + `}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"1","cache_control":{"type":"ephemeral"}},{"type":"text","text":"2","cache_control":{"type":"ephemeral"}}]},{"type":"text","text":"3","cache_control":{"type":"ephemeral"}}]}]}`, 1},
		{"a nested ttl alone: nothing added",
			`{"system":"S","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}]}`,
			"", 0},
		{"a tool_result with string content",
			`{"system":"S","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"ok"}]}]}`,
			`{"system":[{"type":"text","text":"S",` + bp + `}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"ok"}]}]}`, 1},
		{"automatic caching: nothing added", `{"cache_control":{"type":"ephemeral"},"system":"S"}`, "", 0},
		{"no system, no tools", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "", 0},
		{"empty system string", `{"system":""}`, "", 0},
		{"duplicate system", `{"system":"a","system":"b"}`, "", 0},
		{"not an object", `[1]`, "", 0},
		{"malformed", `{"system":"a"`, "", 0},
		{"escaped key", `{"s\u0079stem":"a"}`, `{"s\u0079stem":[{"type":"text","text":"a",` + bp + `}]}`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := InjectCacheControl([]byte(tc.in))
			want := tc.want
			if want == "" {
				want = tc.in
			}
			if string(got) != want || n != tc.added {
				t.Fatalf("got %d:\n%s\nwant %d:\n%s", n, got, tc.added, want)
			}
			if json.Valid([]byte(tc.in)) && !json.Valid(got) {
				t.Fatalf("invalid JSON out: %s", got)
			}
		})
	}
}

// breakpoints counts cache_control members anywhere in a JSON value.
func breakpoints(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if k == "cache_control" && c != nil {
				n++
			}
			n += breakpoints(c)
		}
	case []any:
		for _, c := range x {
			n += breakpoints(c)
		}
	}
	return n
}

func FuzzInjectCacheControl(f *testing.F) {
	for _, s := range []string{
		`{"system":"S","tools":[{"name":"a"}],"messages":[{"role":"user","content":"x"}]}`,
		`{"system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]}`,
		`{"tools":[{}],"messages":[{"content":[{"cache_control":{"type":"ephemeral"}}]}]}`,
		`{"system":"\u00e9\"q","tools":[]}`,
		`{"system":"S","messages":[{"content":[{"type":"tool_result","content":[{"cache_control":{"type":"ephemeral"}},{"cache_control":{"type":"ephemeral"}},{"cache_control":{"type":"ephemeral"}}]}]}]}`,
		`{}`, `[]`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, n := InjectCacheControl(in)
		if n == 0 {
			if string(out) != string(in) {
				t.Fatalf("nothing added but the body changed")
			}
			return
		}
		if n > 2 || !strings.Contains(string(out), `"cache_control":{"type":"ephemeral"}`) {
			t.Fatalf("added %d: %s", n, out)
		}
		if !json.Valid(in) {
			return
		}
		var before, after any
		if err := json.Unmarshal(in, &before); err != nil {
			return
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("valid in, invalid out: %v\n%s\n%s", err, in, out)
		}
		b, a := breakpoints(before), breakpoints(after)
		if a != b+n {
			t.Fatalf("breakpoints %d before, %d after, %d added:\n%s\n%s", b, a, n, in, out)
		}
		if a > MaxCacheBreakpoints && b <= MaxCacheBreakpoints {
			t.Fatalf("more than %d breakpoints: %s", MaxCacheBreakpoints, out)
		}
	})
}

func BenchmarkInjectCacheControl(b *testing.B) {
	body := []byte(`{"model":"claude","max_tokens":256,"tools":[{"name":"search","description":"` + strings.Repeat("d", 500) + `","input_schema":{"type":"object"}}],"system":"` + strings.Repeat("You are helpful. ", 200) + `","messages":[{"role":"user","content":[{"type":"text","text":"hello"}]},{"role":"assistant","content":"hi"},{"role":"user","content":"more"}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, n := InjectCacheControl(body); n != 2 {
			b.Fatal(n)
		}
	}
}
