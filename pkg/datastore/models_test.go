package datastore

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestParseModels(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []scheduling.ModelEntry
		errs []string
	}{
		{name: "yaml", data: "- name: a\n  aliases: [b]\n  pricing: {input: 1, output: 2.5}\n- name: c\n",
			want: []scheduling.ModelEntry{{Name: "a", Aliases: []string{"b"}, Pricing: &scheduling.Price{Input: 1, Output: 2.5}}, {Name: "c"}}},
		{name: "json", data: `[{"name":"a","aliases":["b"]}]`, want: []scheduling.ModelEntry{{Name: "a", Aliases: []string{"b"}}}},
		{name: "empty list", data: "[]", want: []scheduling.ModelEntry{}},
		{name: "pricing {} is unpriced", data: `[{"name":"a","pricing":{}},{"name":"b","pricing":null}]`,
			want: []scheduling.ModelEntry{{Name: "a", Unpriced: true}, {Name: "b", Unpriced: true}}},
		{name: "partial pricing", data: `[{"name":"a","pricing":{"input":1}},{"name":"b","pricing":{"output":1}}]`, errs: []string{
			"m[0].pricing.output: required", "m[1].pricing.input: required"}},
		{name: "blank", data: " ", errs: []string{"m: empty; write [] to declare no model, or leave it out"}},
		{name: "not yaml", data: "[", errs: []string{"m: not valid YAML"}},
		{name: "object", data: "name: a", errs: []string{"m: expected a list of models"}},
		{name: "unknown key", data: "[{name: a, alias: [b]}]", errs: []string{`m[0].alias: unknown field "alias" (did you mean "aliases"?)`}},
		{name: "duplicate key", data: "[{name: a, name: b}]", errs: []string{"m: not valid YAML"}},
		{name: "semantic", data: "[{name: a}, {name: a}]", errs: []string{`m[1].name: "a" is also declared at m[0].name`}},
		{name: "too large", data: "[" + strings.Repeat(" ", MaxModelsBytes) + "]", errs: []string{"m: 262146 bytes exceed the limit of 262144"}},
		{name: "aliases bomb", data: "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
			errs: []string{"m: the document is more than"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseModels([]byte(tt.data), "m")
			if len(tt.errs) == 0 {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Len(t, ve.Errors, len(tt.errs), "%v", err)
			for i, want := range tt.errs {
				assert.Contains(t, ve.Errors[i].Path+": "+ve.Errors[i].Msg, want)
			}
		})
	}
}

// FuzzParseModels: the switchyard.ai/models annotation is written by
// whoever may edit pods. ParseModels never panics; every problem has the
// annotation's path; what it accepts, a spec accepts.
func FuzzParseModels(f *testing.F) {
	for _, s := range []string{
		"- {name: a, aliases: [b], pricing: {input: 1, output: 2}}\n",
		`[{"name":"a"},{"name":"b","aliases":["c","d"]}]`,
		"[{name: a}, {name: a}]", "[", "a: 1", "[{pricing: [1]}]", "[1, null, {aliases: x}]",
		"[{name: a, pricing: {input: .nan}}]", "",
		"[{name: a, pricing: {}}, {name: b, pricing: {output: 1}}, {name: c, pricing: {input: null, output: null}}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		models, err := ParseModels(data, "anno")
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error is not a non-empty *ValidationError: %T %v", err, err)
			}
			for _, fe := range ve.Errors {
				if !strings.HasPrefix(fe.Path, "anno") {
					t.Fatalf("error outside the annotation's path: %q %q", fe.Path, fe.Msg)
				}
			}
			return
		}
		sp := EndpointSpec{Name: "a", Address: "127.0.0.1", Port: 1, Models: models}
		if err := sp.Validate(); err != nil {
			t.Fatalf("ParseModels accepted what a spec refuses: %v", err)
		}
	})
}
