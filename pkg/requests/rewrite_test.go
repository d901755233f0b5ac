package requests

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRewriteModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, model, want string
	}{
		{"simple", `{"model":"a","prompt":"p"}`, "b", `{"model":"b","prompt":"p"}`},
		{"formatting kept", "{\n  \"prompt\" : \"p\",\n  \"model\" :  \"a\" ,\n  \"n\": 1.50\n}\n", "target", "{\n  \"prompt\" : \"p\",\n  \"model\" :  \"target\" ,\n  \"n\": 1.50\n}\n"},
		{"leading white space", ` {"model":"a"}`, "b", ` {"model":"b"}`},
		{"nested model keys untouched", `{"metadata":{"model":"a"},"messages":[{"model":"a"}],"model":"a"}`, "b", `{"metadata":{"model":"a"},"messages":[{"model":"a"}],"model":"b"}`},
		{"model inside strings untouched", `{"prompt":"\"model\":\"a\"","model":"a"}`, "b", `{"prompt":"\"model\":\"a\"","model":"b"}`},
		{"escaped quotes in old value", `{"model":"a\"b\\","x":1}`, "c", `{"model":"c","x":1}`},
		{"new value is escaped", `{"model":"a"}`, "q\"uo\\te\n\x01", `{"model":"q\"uo\\te\n\u0001"}`},
		{"unicode kept verbatim", `{"model":"a"}`, "模型-ü <&>", `{"model":"模型-ü <&>"}`},
		{"line separators escaped", `{"model":"a"}`, "x\u2028y", `{"model":"x\u2028y"}`},
		{"invalid utf-8 replaced", `{"model":"a"}`, "x\xffy", `{"model":"x\ufffdy"}`},
		{"escaped key", `{"mod\u0065l":"a"}`, "b", `{"mod\u0065l":"b"}`},
		{"non-string value replaced", `{"model":123}`, "b", `{"model":"b"}`},
		{"duplicates all replaced", `{"model":"a","x":{},"model":"c"}`, "b", `{"model":"b","x":{},"model":"b"}`},
		{"longer and shorter", `{"model":"a-very-long-model-name","z":[1,2]}`, "s", `{"model":"s","z":[1,2]}`},
		{"empty name", `{"model":"a"}`, "", `{"model":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := RewriteModel([]byte(tc.body), tc.model)
			if err != nil {
				t.Fatalf("RewriteModel: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("RewriteModel(%q, %q)\n got %q\nwant %q", tc.body, tc.model, got, tc.want)
			}
			var v map[string]any
			if err := json.Unmarshal(got, &v); err != nil {
				t.Fatalf("result is not JSON: %v", err)
			}
			if want := strings.ToValidUTF8(tc.model, "\uFFFD"); v["model"] != want {
				t.Errorf("decoded model = %q, want %q", v["model"], want)
			}
		})
	}
}

func TestRewriteModelUnchanged(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"same","prompt":"p"}`)
	got, err := RewriteModel(body, "same")
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &body[0] {
		t.Errorf("RewriteModel with the same name copied the body")
	}
}

func TestRewriteModelErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body   string
		field, error string
	}{
		{"no model", `{"prompt":"p","x":{"model":"a"}}`, "model", "is required"},
		{"empty", "  ", "", "body is empty"},
		{"array", `[{"model":"a"}]`, "", "body must be a JSON object, got an array"},
		{"truncated", `{"model":"a"`, "", "body is not valid JSON"},
		{"broken", `{"model" "a"}`, "", "body is not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := RewriteModel([]byte(tc.body), "b")
			var pe *Error
			if !errors.As(err, &pe) || pe.Field != tc.field || pe.Message != tc.error {
				t.Errorf("RewriteModel(%q) error = %#v, want {%q, %q}", tc.body, err, tc.field, tc.error)
			}
		})
	}
}

func TestRewriteResponseModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, chunk, from, to, want string
	}{
		{"compact", `{"id":"1","model":"target","choices":[]}`, "target", "client", `{"id":"1","model":"client","choices":[]}`},
		{"spaced", `{"id": "1", "model": "target"}`, "target", "client", `{"id": "1", "model": "client"}`},
		{"both spellings and nested", `{"model":"target","response":{"model": "target"}}`, "target", "client", `{"model":"client","response":{"model": "client"}}`},
		{"sse chunks", "data: {\"model\":\"t\",\"x\":1}\n\ndata: {\"model\":\"t\"}\n\ndata: [DONE]\n\n", "t", "c", "data: {\"model\":\"c\",\"x\":1}\n\ndata: {\"model\":\"c\"}\n\ndata: [DONE]\n\n"},
		{"prefix of a longer name untouched", `{"model":"target-v2"}`, "target", "client", `{"model":"target-v2"}`},
		{"other spacing untouched", `{"model" : "target"}`, "target", "client", `{"model" : "target"}`},
		{"names escaped", `{"model":"a\"b"}`, `a"b`, `c"d`, `{"model":"c\"d"}`},
		{"unicode", `{"model":"模型"}`, "模型", "ü", `{"model":"ü"}`},
		{"truncated at the end", `{"model":"targ`, "target", "client", `{"model":"targ`},
		{"key at the very end", `{"model":`, "target", "client", `{"model":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RewriteResponseModel([]byte(tc.chunk), tc.from, tc.to); string(got) != tc.want {
				t.Errorf("RewriteResponseModel(%q, %q, %q)\n got %q\nwant %q", tc.chunk, tc.from, tc.to, got, tc.want)
			}
		})
	}
}

func TestRewriteResponseModelNoCopy(t *testing.T) {
	chunk := []byte(`{"model":"target","x":"model"}`)
	for _, tc := range []struct{ from, to string }{
		{"", "client"}, {"target", ""}, {"target", "target"}, {"absent", "client"},
	} {
		got := RewriteResponseModel(chunk, tc.from, tc.to)
		if &got[0] != &chunk[0] || string(got) != string(chunk) {
			t.Errorf("RewriteResponseModel(%q, %q) did not return the chunk itself", tc.from, tc.to)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		_ = RewriteResponseModel(chunk, "absent", "client")
	})
	if allocs != 0 {
		t.Errorf("RewriteResponseModel with no match allocated %v times", allocs)
	}
}
