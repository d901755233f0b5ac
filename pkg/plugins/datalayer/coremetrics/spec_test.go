package coremetrics

import (
	"maps"
	"strconv"
	"strings"
	"testing"
)

func TestParseMetricSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    *MetricSpec
		wantErr string // substring of the error after the common prefix
	}{
		{in: "", want: nil},
		{in: "vllm:num_requests_waiting", want: &MetricSpec{Name: "vllm:num_requests_waiting", Labels: map[string]string{}}},
		{in: "  spaced_name \t", want: &MetricSpec{Name: "spaced_name", Labels: map[string]string{}}},
		{in: "foo{}", want: &MetricSpec{Name: "foo", Labels: map[string]string{}}},
		{in: `m{request_type=waiting}`, want: &MetricSpec{Name: "m", Labels: map[string]string{"request_type": "waiting"}}},
		{in: `m{request_type="waiting"}`, want: &MetricSpec{Name: "m", Labels: map[string]string{"request_type": "waiting"}}},
		{in: `m { a = "1" , b=2, }`, want: &MetricSpec{Name: "m", Labels: map[string]string{"a": "1", "b": "2"}}},
		{in: `m{a="with \"quotes\", commas} and spaces"}`, want: &MetricSpec{Name: "m", Labels: map[string]string{"a": `with "quotes", commas} and spaces`}}},
		{in: `m{a=""}`, want: &MetricSpec{Name: "m", Labels: map[string]string{"a": ""}}},
		{in: `m{a=x=y}`, want: &MetricSpec{Name: "m", Labels: map[string]string{"a": "x=y"}}},
		{in: `m{a='x'}`, want: &MetricSpec{Name: "m", Labels: map[string]string{"a": "'x'"}}},
		{in: `_m:x_1{_l1=v.1-2}`, want: &MetricSpec{Name: "_m:x_1", Labels: map[string]string{"_l1": "v.1-2"}}},
		{in: "   ", wantErr: "expected a metric name at offset 3"},
		{in: "1metric", wantErr: "expected a metric name at offset 0"},
		{in: `{a="b"}`, wantErr: `missing metric name before "{"`},
		{in: "foo{", wantErr: `missing "}" at offset 4`},
		{in: "foo}", wantErr: `unexpected "}" at offset 3`},
		{in: "foo bar", wantErr: `unexpected "b"`},
		{in: "foo{a}", wantErr: `expected "=" after label "a"`},
		{in: "foo{a=}", wantErr: "missing label value"},
		{in: "foo{a=", wantErr: "missing label value"},
		{in: "foo{=b}", wantErr: `expected a label name or "}"`},
		{in: "foo{a=b c=d}", wantErr: `expected "," or "}" after the value of "a"`},
		{in: "foo{a=b", wantErr: `missing "}"`},
		{in: `foo{a="b}`, wantErr: "unterminated quoted value"},
		{in: `foo{a="\q"}`, wantErr: "invalid quoted value"},
		{in: `foo{a!="b"}`, wantErr: `only equality matchers (label="value") are supported, got "!="`},
		{in: `foo{a=~"b.*"}`, wantErr: `got "=~"`},
		{in: `foo{a!~"b"}`, wantErr: `got "!~"`},
		{in: `foo{__name__="foo"}`, wantErr: `label name "__name__" is reserved`},
		{in: `foo{a="1",a="2"}`, wantErr: `label "a" given twice at offset 10`},
		{in: `foo{a:b="1"}`, wantErr: `expected "=" after label "a"`},
		{in: "foo{a=b}}", wantErr: `unexpected "}"`},
		{in: "foo{}{}", wantErr: `unexpected "{"`},
		{in: "foo[5m]", wantErr: `unexpected "["`},
		{in: "rate(foo[5m])", wantErr: `unexpected "("`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseMetricSpec(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseMetricSpec(%q) = %v, want an error containing %q", tt.in, got, tt.wantErr)
				}
				prefix := "invalid metric spec " + strconv.Quote(tt.in) + ": "
				if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %q, want %q followed by %q", err, prefix, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseMetricSpec(%q): %v", tt.in, err)
			}
			if !equalSpecs(got, tt.want) {
				t.Errorf("ParseMetricSpec(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
		})
	}
}

func equalSpecs(a, b *MetricSpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && maps.Equal(a.Labels, b.Labels)
}

func TestMetricSpecString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec *MetricSpec
		want string
	}{
		{spec: nil, want: ""},
		{spec: &MetricSpec{Name: "foo"}, want: "foo"},
		{spec: &MetricSpec{Name: "foo", Labels: map[string]string{"b": "2", "a": `x"y`}}, want: `foo{a="x\"y",b="2"}`},
	}
	for _, tt := range tests {
		if got := tt.spec.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestMetricSpecMatches(t *testing.T) {
	t.Parallel()
	spec := &MetricSpec{Name: "m", Labels: map[string]string{"type": "waiting", "absent": ""}}
	tests := []struct {
		labels map[string]string
		want   bool
	}{
		{labels: map[string]string{"type": "waiting"}, want: true},
		{labels: map[string]string{"type": "waiting", "other": "x"}, want: true},
		{labels: map[string]string{"type": "waiting", "absent": ""}, want: true},
		{labels: map[string]string{"type": "waiting", "absent": "set"}, want: false},
		{labels: map[string]string{"type": "scheduled"}, want: false},
		{labels: nil, want: false},
	}
	for _, tt := range tests {
		if got := spec.Matches(tt.labels); got != tt.want {
			t.Errorf("Matches(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
	if !(&MetricSpec{Name: "m"}).Matches(nil) {
		t.Error("a spec without labels must match any series")
	}
}

// FuzzParseMetricSpec checks that the parser never panics, that what it
// accepts is well formed, and that String gives back an equivalent spec.
func FuzzParseMetricSpec(f *testing.F) {
	for _, s := range []string{
		"", "foo", "vllm:kv_cache_usage_perc", "foo{}", `foo{a="b"}`, "foo{a=b,c=d,}",
		`nv_trt_llm_request_metrics{request_type=waiting}`, `m{a="x\"y\\z\n"}`, `m{a!="b"}`, "foo{",
		`{__name__="x"}`, "m{a=\xff}", " m { a = 1 } ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseMetricSpec(s)
		if err != nil {
			if spec != nil {
				t.Fatalf("ParseMetricSpec(%q) returned a spec and an error", s)
			}
			if !strings.HasPrefix(err.Error(), "invalid metric spec ") {
				t.Fatalf("error without the common prefix: %q", err)
			}
			return
		}
		if s == "" {
			if spec != nil {
				t.Fatalf("empty spec gave %v", spec)
			}
			return
		}
		if spec == nil || spec.Name == "" || !validMetricName(spec.Name) {
			t.Fatalf("ParseMetricSpec(%q) = %#v: invalid name", s, spec)
		}
		for k := range spec.Labels {
			if !validLabelName(k) || strings.HasPrefix(k, "__") {
				t.Fatalf("ParseMetricSpec(%q): invalid label name %q", s, k)
			}
		}
		again, err := ParseMetricSpec(spec.String())
		if err != nil {
			t.Fatalf("ParseMetricSpec(%q).String() = %q does not parse: %v", s, spec.String(), err)
		}
		if !equalSpecs(spec, again) {
			t.Fatalf("round trip of %q: %#v != %#v", s, spec, again)
		}
		if !spec.Matches(spec.Labels) {
			t.Fatalf("spec %q does not match its own labels", s)
		}
	})
}

func validMetricName(s string) bool {
	if s == "" || !isNameStart(s[0], true) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameChar(s[i], true) {
			return false
		}
	}
	return true
}
