package passthrough

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{name: "no parameters"},
		{name: "null parameters", raw: `null`},
		{name: "empty object", raw: `{}`},
		{name: "unknown key", raw: `{"format": "passthrough"}`, wantErr: `unknown field "format"`},
		{name: "wrong type", raw: `["passthrough"]`, wantErr: "expected an object, got array"},
		{name: "trailing data", raw: `{} {}`, wantErr: "invalid character '{' after top-level value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var raw json.RawMessage
			if tt.raw != "" {
				raw = json.RawMessage(tt.raw)
			}
			p, err := Registration.Factory("my-parser", raw, schedulingtest.NewHandle(t))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got := p.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "my-parser"}) {
				t.Errorf("TypedName() = %v", got)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	p, err := Registration.Factory(Type, nil, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	parser, ok := p.(scheduling.Parser)
	if !ok {
		t.Fatalf("%T is not a scheduling.Parser", p)
	}
	if got := parser.Format(); got != "passthrough" {
		t.Errorf("Format() = %q, want %q", got, "passthrough")
	}
	if got := p.TypedName().String(); got != "passthrough-parser" {
		t.Errorf("TypedName().String() = %q", got)
	}
}
