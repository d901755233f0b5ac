package yamldoc_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
)

func noSecond(data []byte) string {
	if strings.Contains(string(data), "\n---\nb") {
		return "two documents"
	}
	return ""
}

func TestDecode(t *testing.T) {
	lax := yamldoc.Rules{Empty: "empty", Check: noSecond, NotDecoded: "not valid JSON"}
	strict := yamldoc.Rules{Empty: "empty", Strict: true, NotDecoded: "not valid YAML"}
	tests := []struct {
		name    string
		rules   yamldoc.Rules
		in      string
		want    any
		problem string
	}{
		{name: "blank", rules: lax, in: " \n\t\n", problem: "empty"},
		{name: "comments only", rules: strict, in: "# nothing\n", problem: "empty"},
		{name: "null", rules: lax, in: "null\n", problem: "empty"},
		{name: "tilde", rules: strict, in: "~", problem: "empty"},
		{name: "check", rules: lax, in: "a: 1\n---\nb: 2\n", problem: "two documents"},
		{name: "syntax", rules: lax, in: "a: [1, 2\n", problem: "not valid YAML: line 1: did not find expected ',' or ']'"},
		{name: "duplicate key strict", rules: strict, in: "a: 1\na: 2\n", problem: `not valid YAML: line 2: key "a" already set in map`},
		{name: "duplicate key lax", rules: lax, in: "a: 1\na: 2\n", want: map[string]any{"a": json.Number("2")}},
		{name: "nan", rules: strict, in: "a: .nan\n", problem: "not valid YAML: a number is .nan or .inf; every number must be finite"},
		{name: "numbers", rules: lax, in: "a: 1\nb: 2.5\nc: [x, true]\n", want: map[string]any{
			"a": json.Number("1"), "b": json.Number("2.5"), "c": []any{"x", true},
		}},
		{name: "json", rules: strict, in: `{"a": "b"}`, want: map[string]any{"a": "b"}},
		{name: "scalar", rules: strict, in: "42", want: json.Number("42")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problem := yamldoc.Decode([]byte(tt.in), tt.rules)
			if problem != tt.problem {
				t.Fatalf("problem %q, want %q", problem, tt.problem)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("root %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestMessage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"error converting YAML to JSON: yaml: line 3: mapping values are not allowed in this context", "line 3: mapping values are not allowed in this context"},
		{"yaml: unmarshal errors:\n  line 1: a\n  line 2: b", "line 1: a; line 2: b"},
		{"json: unsupported value: +Inf", "a number is .nan or .inf; every number must be finite"},
		{"json: unsupported value: -Inf", "a number is .nan or .inf; every number must be finite"},
		{"something else", "something else"},
	}
	for _, tt := range tests {
		if got := yamldoc.Message(errors.New(tt.in)); got != tt.want {
			t.Errorf("Message(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTypeName(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{nil, "null"},
		{"s", "a string"},
		{json.Number("1"), "a number"},
		{true, "a boolean"},
		{[]any{}, "a list"},
		{map[string]any{}, "an object"},
		{3.5, "float64"},
	}
	for _, tt := range tests {
		if got := yamldoc.TypeName(tt.in); got != tt.want {
			t.Errorf("TypeName(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		obj     map[string]any
		allowed []string
		want    []string
	}{
		{obj: nil, allowed: []string{"a"}, want: nil},
		{obj: map[string]any{"a": 1, "b": 2}, allowed: []string{"a", "b"}, want: nil},
		{obj: map[string]any{"z": 1, "a": 2, "m": 3}, allowed: []string{"a"}, want: []string{"m", "z"}},
		{obj: map[string]any{"A": 1}, allowed: []string{"a"}, want: []string{"A"}},
	}
	for _, tt := range tests {
		if got := yamldoc.UnknownKeys(tt.obj, tt.allowed); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("UnknownKeys(%v, %v) = %v, want %v", tt.obj, tt.allowed, got, tt.want)
		}
	}
}

// FuzzDecode checks that Decode never panics and returns either a root or
// a problem, never both, with the YAML library's prefix removed.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("a: 1\n"), true)
	f.Add([]byte("a: 1\na: 2\n"), false)
	f.Add([]byte(""), true)
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		root, problem := yamldoc.Decode(data, yamldoc.Rules{Empty: "empty", Strict: strict, NotDecoded: "not valid JSON"})
		if problem != "" && root != nil {
			t.Fatalf("root %#v with problem %q", root, problem)
		}
		if problem == "" && root == nil {
			t.Fatal("neither a root nor a problem")
		}
		if strings.HasPrefix(problem, "not valid YAML: yaml: ") {
			t.Fatalf("problem %q", problem)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	data := []byte("endpoints:\n- name: sim-0\n  address: 127.0.0.1\n  port: 8000\n  labels: {app: sim}\n")
	r := yamldoc.Rules{Empty: "empty", Strict: true, NotDecoded: "not valid YAML"}
	b.ReportAllocs()
	for b.Loop() {
		if _, p := yamldoc.Decode(data, r); p != "" {
			b.Fatal(p)
		}
	}
}
