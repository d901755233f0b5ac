package bylabel

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantErrs []string
	}{
		{name: "label and values", raw: `{"label": "llm-d.ai/role", "validValues": ["decode", "both"]}`},
		{name: "no label allowed", raw: `{"label": "llm-d.ai/role", "allowsNoLabel": true}`},
		{name: "no parameters", raw: "", wantErrs: []string{"label: required", "validValues: must not be empty unless allowsNoLabel is true"}},
		{name: "blank label", raw: `{"label": " ", "validValues": ["a"]}`, wantErrs: []string{"label: required"}},
		{name: "no values", raw: `{"label": "role"}`, wantErrs: []string{"validValues: must not be empty"}},
		{name: "unknown key", raw: `{"label": "role", "validValues": ["a"], "allowNoLabel": true}`, wantErrs: []string{`unknown field "allowNoLabel"`}},
		{name: "wrong type", raw: `{"label": "role", "validValues": "a"}`, wantErrs: []string{"validValues: expected a list, got string"}},
		{name: "wrong type bool", raw: `{"label": "role", "allowsNoLabel": "yes"}`, wantErrs: []string{"allowsNoLabel: expected a boolean, got string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw json.RawMessage
			if tt.raw != "" {
				raw = json.RawMessage(tt.raw)
			}
			got, err := Registration.Factory("role", raw, schedulingtest.NewHandle(t))
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
				}
				if n := len(scheduling.Errors(err)); n != len(tt.wantErrs) {
					t.Errorf("got %d errors, want %d: %v", n, len(tt.wantErrs), err)
				}
				for _, want := range tt.wantErrs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error = %v, want one containing %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if want := (scheduling.TypedName{Type: Type, Name: "role"}); got.TypedName() != want {
				t.Errorf("TypedName = %v, want %v", got.TypedName(), want)
			}
		})
	}
	if Registration.Deprecated == "" || !strings.Contains(Registration.Deprecated, "label-selector-filter") {
		t.Errorf("Deprecated = %q, want a pointer to label-selector-filter", Registration.Deprecated)
	}
}

func TestFilter(t *testing.T) {
	const role = "llm-d.ai/role"
	eps := []*scheduling.Endpoint{
		schedulingtest.Endpoint("decode").Label(role, "decode").Build(),
		schedulingtest.Endpoint("prefill").Label(role, "prefill").Build(),
		schedulingtest.Endpoint("both").Label(role, "both").Build(),
		schedulingtest.Endpoint("empty").Label(role, "").Build(),
		schedulingtest.Endpoint("unlabeled").Build(),
		schedulingtest.Endpoint("other").Label("app", "decode").Build(),
	}
	many := []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "decode"}
	tests := []struct {
		name string
		p    Params
		want []string
	}{
		{name: "one value", p: Params{Label: role, ValidValues: []string{"decode"}}, want: []string{"decode"}},
		{name: "two values", p: Params{Label: role, ValidValues: []string{"both", "decode"}}, want: []string{"decode", "both"}},
		{
			name: "allows no label", p: Params{Label: role, ValidValues: []string{"decode"}, AllowsNoLabel: true},
			want: []string{"decode", "unlabeled", "other"},
		},
		{name: "only unlabeled", p: Params{Label: role, AllowsNoLabel: true}, want: []string{"unlabeled", "other"}},
		{
			// llm-d reads a missing label as "".
			name: "empty value also keeps unlabeled", p: Params{Label: role, ValidValues: []string{""}},
			want: []string{"empty", "unlabeled", "other"},
		},
		{name: "no match", p: Params{Label: role, ValidValues: []string{"encode"}}, want: nil},
		{name: "values are case-sensitive", p: Params{Label: role, ValidValues: []string{"Decode"}}, want: nil},
		{name: "many values", p: Params{Label: role, ValidValues: many}, want: []string{"decode"}},
		{name: "duplicate values", p: Params{Label: role, ValidValues: []string{"decode", "decode"}}, want: []string{"decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := New("", tt.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			in := slices.Clone(eps)
			got := f.Filter(t.Context(), &scheduling.Request{}, in)
			if names := schedulingtest.Names(got); !slices.Equal(names, tt.want) {
				t.Errorf("kept %v, want %v", names, tt.want)
			}
			if !slices.Equal(in, eps) {
				t.Error("Filter modified its input")
			}
		})
	}
}

func TestFilterKeepsAll(t *testing.T) {
	eps := schedulingtest.Endpoints(5, func(_ int, b *schedulingtest.EndpointBuilder) { b.Label("tier", "gold") })
	f, err := New("", Params{Label: "tier", ValidValues: []string{"gold"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Filter(t.Context(), nil, eps); len(got) != 5 || &got[0] != &eps[0] {
		t.Errorf("want the input slice back when every endpoint passes, got %v", schedulingtest.Names(got))
	}
}
