package labelselector

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := []struct {
		name     string
		raw      string
		wantErrs []string
	}{
		{name: "no parameters", raw: ""},
		{name: "empty object", raw: "{}"},
		{name: "match labels", raw: `{"matchLabels": {"llm-d.ai/role": "decode", "hardware": "H100", "empty": ""}}`},
		{name: "every operator", raw: `{"matchExpressions": [
			{"key": "app.kubernetes.io/name", "operator": "In", "values": ["vllm", "sglang"]},
			{"key": "tier", "operator": "NotIn", "values": ["free"]},
			{"key": "gpu", "operator": "Exists"},
			{"key": "draining", "operator": "DoesNotExist", "values": []}]}`},
		{name: "unknown key", raw: `{"matchLabel": {"a": "b"}}`, wantErrs: []string{`unknown field "matchLabel"`}},
		{
			name: "unknown nested key", raw: `{"matchExpressions": [{"key": "a", "operator": "In", "value": ["x"]}]}`,
			wantErrs: []string{`unknown field "matchExpressions[0].value"`},
		},
		{name: "wrong type", raw: `{"matchLabels": ["a=b"]}`, wantErrs: []string{"matchLabels: expected an object, got array"}},
		{name: "wrong nested type", raw: `{"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}`, wantErrs: []string{"values: expected a list, got string"}},
		{name: "wrong label value type", raw: `{"matchLabels": {"a": 1}}`, wantErrs: []string{"expected a string, got number"}},
		{
			name: "every problem reported",
			raw: `{"matchExpressions": [
				{"key": "a", "operator": "In"},
				{"key": "b", "operator": "Exists", "values": ["x"]},
				{"operator": "in", "values": ["x"]},
				{"key": "d", "operator": "NotIn", "values": []},
				{"key": "e", "operator": "DoesNotExist", "values": ["y"]},
				{"key": "f"}]}`,
			// apimachinery's messages, under our paths.
			wantErrs: []string{
				"matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
				"matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
				`matchExpressions[2].key: Invalid value: "": name part must be non-empty`,
				`matchExpressions[2].key: Invalid value: "": name part must consist of alphanumeric characters`,
				`matchExpressions[2].operator: Invalid value: "in": not a valid selector operator`,
				"matchExpressions[3].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
				"matchExpressions[4].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
				`matchExpressions[5].operator: Invalid value: "": not a valid selector operator`,
			},
		},
		{
			name: "invalid keys and values",
			raw: `{"matchLabels": {"bad key": "ok", "good": "bad value!", "example.com/": "x", "/name": "x", "Example.com/x": "x", "a/b/c": "x", "` + long + `": "x", "long": "` + long + `"},
				"matchExpressions": [{"key": "-x", "operator": "In", "values": ["ok", "-no"]}]}`,
			wantErrs: []string{
				`matchLabels["bad key"]: Invalid value: "bad key": name part must consist of alphanumeric characters`,
				`matchLabels["good"]: Invalid value: "bad value!": a valid label must be an empty string or consist of alphanumeric characters`,
				`matchLabels["example.com/"]: Invalid value: "example.com/": name part must be non-empty`,
				`matchLabels["example.com/"]: Invalid value: "example.com/": name part must consist of alphanumeric characters`,
				`matchLabels["/name"]: Invalid value: "/name": prefix part must be non-empty`,
				`matchLabels["Example.com/x"]: Invalid value: "Example.com/x": prefix part a lowercase RFC 1123 subdomain`,
				`matchLabels["a/b/c"]: Invalid value: "a/b/c": a valid label key must consist of`,
				`matchLabels["` + long + `"]: Invalid value: "` + long + `": name part must be no more than 63 bytes`,
				`matchLabels["long"]: Invalid value: "` + long + `": must be no more than 63 bytes`,
				`matchExpressions[0].key: Invalid value: "-x": name part must consist of`,
				`matchExpressions[0].values[1]: Invalid value: "-no": a valid label must be`,
			},
		},
	}
	for _, reg := range []scheduling.Registration{Registration, AliasRegistration} {
		for _, tt := range tests {
			t.Run(reg.Type+"/"+tt.name, func(t *testing.T) {
				var raw json.RawMessage
				if tt.raw != "" {
					raw = json.RawMessage(tt.raw)
				}
				got, err := reg.Factory("sel", raw, schedulingtest.NewHandle(t))
				if len(tt.wantErrs) > 0 {
					if err == nil {
						t.Fatalf("no error, want %q", tt.wantErrs)
					}
					if n := len(scheduling.Errors(err)); n != len(tt.wantErrs) {
						t.Errorf("got %d errors, want %d:\n%v", n, len(tt.wantErrs), err)
					}
					for _, want := range tt.wantErrs {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("error = %v\nwant one containing %q", err, want)
						}
					}
					return
				}
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if want := (scheduling.TypedName{Type: reg.Type, Name: "sel"}); got.TypedName() != want {
					t.Errorf("TypedName = %v, want %v", got.TypedName(), want)
				}
			})
		}
	}
	if Registration.Deprecated != "" {
		t.Errorf("label-selector-filter is deprecated: %q", Registration.Deprecated)
	}
	if !strings.Contains(AliasRegistration.Deprecated, Type) {
		t.Errorf("alias Deprecated = %q, want a pointer to %s", AliasRegistration.Deprecated, Type)
	}
}

func TestFilter(t *testing.T) {
	const role = "llm-d.ai/role"
	eps := []*scheduling.Endpoint{
		schedulingtest.Endpoint("decode-h100").Label(role, "decode").Label("hw", "H100").Build(),
		schedulingtest.Endpoint("decode-a100").Label(role, "decode").Label("hw", "A100").Build(),
		schedulingtest.Endpoint("prefill").Label(role, "prefill").Label("hw", "H100").Build(),
		schedulingtest.Endpoint("empty-role").Label(role, "").Build(),
		schedulingtest.Endpoint("unlabeled").Build(),
	}
	many := []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "prefill", "v1"}
	tests := []struct {
		name string
		p    Params
		want []string
	}{
		{name: "empty selector keeps all", p: Params{}, want: []string{"decode-h100", "decode-a100", "prefill", "empty-role", "unlabeled"}},
		{name: "one label", p: Params{MatchLabels: map[string]string{role: "decode"}}, want: []string{"decode-h100", "decode-a100"}},
		{name: "labels are ANDed", p: Params{MatchLabels: map[string]string{role: "decode", "hw": "H100"}}, want: []string{"decode-h100"}},
		{name: "empty value needs the label", p: Params{MatchLabels: map[string]string{role: ""}}, want: []string{"empty-role"}},
		{name: "values are case-sensitive", p: Params{MatchLabels: map[string]string{"hw": "h100"}}, want: nil},
		{
			name: "In", p: Params{MatchExpressions: []Requirement{{Key: role, Operator: In, Values: []string{"prefill", "decode"}}}},
			want: []string{"decode-h100", "decode-a100", "prefill"},
		},
		{
			name: "In with many values", p: Params{MatchExpressions: []Requirement{{Key: role, Operator: In, Values: many}}},
			want: []string{"prefill"},
		},
		{
			name: "NotIn keeps endpoints without the label", p: Params{MatchExpressions: []Requirement{{Key: role, Operator: NotIn, Values: []string{"decode"}}}},
			want: []string{"prefill", "empty-role", "unlabeled"},
		},
		{
			name: "NotIn with many values", p: Params{MatchExpressions: []Requirement{{Key: role, Operator: NotIn, Values: many}}},
			want: []string{"decode-h100", "decode-a100", "empty-role", "unlabeled"},
		},
		{
			name: "Exists", p: Params{MatchExpressions: []Requirement{{Key: "hw", Operator: Exists}}},
			want: []string{"decode-h100", "decode-a100", "prefill"},
		},
		{
			name: "DoesNotExist", p: Params{MatchExpressions: []Requirement{{Key: "hw", Operator: DoesNotExist}}},
			want: []string{"empty-role", "unlabeled"},
		},
		{
			name: "labels and expressions together",
			p: Params{
				MatchLabels:      map[string]string{"hw": "H100"},
				MatchExpressions: []Requirement{{Key: role, Operator: NotIn, Values: []string{"prefill"}}},
			},
			want: []string{"decode-h100"},
		},
		{
			name: "by-label equivalent with allowsNoLabel",
			p:    Params{MatchExpressions: []Requirement{{Key: role, Operator: NotIn, Values: []string{"prefill", ""}}}},
			want: []string{"decode-h100", "decode-a100", "unlabeled"},
		},
		{
			name: "contradiction keeps nothing",
			p:    Params{MatchExpressions: []Requirement{{Key: "hw", Operator: Exists}, {Key: "hw", Operator: DoesNotExist}}},
			want: nil,
		},
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
	eps := schedulingtest.Endpoints(4, func(_ int, b *schedulingtest.EndpointBuilder) { b.Label("app", "vllm") })
	f, err := New("", Params{MatchLabels: map[string]string{"app": "vllm"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Filter(t.Context(), nil, eps); len(got) != 4 || &got[0] != &eps[0] {
		t.Errorf("want the input slice back when every endpoint matches, got %v", schedulingtest.Names(got))
	}
}

func TestNewRejectsInvalid(t *testing.T) {
	_, err := New("x", Params{MatchExpressions: []Requirement{{Key: "a", Operator: "Gt", Values: []string{"1"}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `matchExpressions[0].operator: Invalid value: "Gt": not a valid selector operator`) {
		t.Errorf("error = %v", err)
	}
}
