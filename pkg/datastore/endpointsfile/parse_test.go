package endpointsfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []datastore.EndpointSpec
	}{
		{
			name: "full",
			data: `
# Two simulators.
endpoints:
- name: sim-0
  address: 127.0.0.1
  port: 8001
  labels: {app: vllm, "inference.networking.k8s.io/engine-type": vllm}
  weight: 2
  metricsPort: 9001
  metricsPath: /metrics
  engine: vllm
- name: sim-1
  namespace: default
  podName: sim-1-pod
  address: "::1"
  port: 8002
`,
			want: []datastore.EndpointSpec{
				{Name: "sim-0", Address: "127.0.0.1", Port: 8001, Labels: map[string]string{"app": "vllm", "inference.networking.k8s.io/engine-type": "vllm"}, Weight: 2, MetricsPort: 9001, MetricsPath: "/metrics", Engine: "vllm"},
				{Name: "sim-1", Namespace: "default", PodName: "sim-1-pod", Address: "::1", Port: 8002},
			},
		},
		{name: "empty list", data: "endpoints: []\n", want: []datastore.EndpointSpec{}},
		{name: "null list", data: "endpoints:\n", want: []datastore.EndpointSpec{}},
		{name: "json", data: `{"endpoints":[{"name":"a","address":"localhost","port":80}]}`, want: []datastore.EndpointSpec{{Name: "a", Address: "localhost", Port: 80}}},
		{name: "leading document marker", data: "---\nendpoints: []\n...\n", want: []datastore.EndpointSpec{}},
		{
			name: "models and internal",
			data: `endpoints:
- name: a
  address: 127.0.0.1
  port: 1
  internal: true
  models:
  - name: meta-llama/Llama-3.1-8B-Instruct
    aliases: [llama, llama-8b]
    pricing: {input: 0.15, output: 0.6}
  - name: mistral
    pricing: {}
  - {name: qwen, aliases: null, pricing: null}
  - {name: phi, pricing: {input: null, output: null}}
- {name: b, address: 127.0.0.1, port: 2, internal: false, models: []}
`,
			want: []datastore.EndpointSpec{
				{Name: "a", Address: "127.0.0.1", Port: 1, Internal: true, Models: []scheduling.ModelEntry{
					{Name: "meta-llama/Llama-3.1-8B-Instruct", Aliases: []string{"llama", "llama-8b"}, Pricing: &scheduling.Price{Input: 0.15, Output: 0.6}},
					{Name: "mistral", Unpriced: true}, // pricing: {} is pricing: null
					{Name: "qwen", Unpriced: true},
					{Name: "phi", Unpriced: true},
				}},
				{Name: "b", Address: "127.0.0.1", Port: 2, Models: []scheduling.ModelEntry{}},
			},
		},
		{name: "scrape", data: "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, scrape: false}\n- {name: b, address: 127.0.0.1, port: 2, scrape: true}\n- {name: c, address: 127.0.0.1, port: 3, scrape: null}\n",
			want: []datastore.EndpointSpec{{Name: "a", Address: "127.0.0.1", Port: 1, NoScrape: true}, {Name: "b", Address: "127.0.0.1", Port: 2}, {Name: "c", Address: "127.0.0.1", Port: 3}}},
		{name: "null fields are absent", data: "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, labels: null, weight: null}\n", want: []datastore.EndpointSpec{{Name: "a", Address: "127.0.0.1", Port: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.data))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string // every FieldError, as "path: msg"
	}{
		{"empty", "  \n", []string{"the file is empty; write `endpoints: []` for an empty pool"}},
		{"comments only", "# nothing\n", []string{"the file is empty; write `endpoints: []` for an empty pool"}},
		{"not yaml", "endpoints: [\n", []string{"not valid YAML: line 1: did not find expected node content"}},
		{"tab", "endpoints:\n\t- name: a\n", []string{"not valid YAML: line 2: found character that cannot start any token"}},
		{"duplicate key", "endpoints: []\nendpoints: []\n", []string{`not valid YAML: line 2: key "endpoints" already set in map`}},
		{"two documents", "endpoints: []\n---\nendpoints: []\n", []string{"a second YAML document starts at line 2; an endpoints file holds exactly one"}},
		{"list root", "- name: a\n", []string{"expected an object with an endpoints list, got a list"}},
		{"missing endpoints", "endpoint: []\n", []string{
			`endpoint: unknown field "endpoint" (did you mean "endpoints"?)`,
			"endpoints: required; write `endpoints: []` for an empty pool",
		}},
		{"odd keys", "{\"\": 1, \"a.b\": 2, endpoints: []}\n", []string{
			`[""]: unknown field "" (allowed: endpoints)`,
			`["a.b"]: unknown field "a.b" (allowed: endpoints)`,
		}},
		{"endpoints not a list", "endpoints: {name: a}\n", []string{"endpoints: expected a list, got an object"}},
		{"item not an object", "endpoints: [a, {name: b, address: 127.0.0.1, port: 1}]\n", []string{"endpoints[0]: expected an object, got a string"}},
		{"unknown fields", "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, prot: 2, zzz: 1}\n", []string{
			`endpoints[0].prot: unknown field "prot" (did you mean "port"?)`,
			`endpoints[0].zzz: unknown field "zzz" (allowed: name, namespace, podName, address, port, labels, weight, metricsPort, metricsPath, engine, models, internal, scrape, providerTpm, providerRpm)`,
		}},
		{"scrape not a boolean", "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, scrape: \"no\"}\n", []string{
			"endpoints[0].scrape: expected true or false, got a string",
		}},
		{"model types", `endpoints:
- name: a
  address: 127.0.0.1
  port: 1
  internal: "yes"
  models:
  - llama
  - {aliases: [1], pricing: {input: cheap, outptu: 1}, prcing: 2}
  - {name: 5, aliases: x, pricing: [1]}
- {name: b, address: 127.0.0.1, port: 2, models: {name: x}}
`, []string{
			"endpoints[0].internal: expected true or false, got a string",
			"endpoints[0].models[0]: expected an object with a name, got a string",
			`endpoints[0].models[1].prcing: unknown field "prcing" (did you mean "pricing"?)`,
			"endpoints[0].models[1].name: required",
			"endpoints[0].models[1].aliases[0]: expected a string, got a number",
			`endpoints[0].models[1].pricing.outptu: unknown field "outptu" (did you mean "output"?)`,
			"endpoints[0].models[1].pricing.input: expected a number (USD per 1M tokens), got a string",
			"endpoints[0].models[1].pricing.output: required: a pricing gives both input and output (pricing: {} or null for no price)",
			"endpoints[0].models[2].name: expected a string, got a number",
			"endpoints[0].models[2].aliases: expected a list of strings, got a string",
			"endpoints[0].models[2].pricing: expected an object {input, output} in USD per 1M tokens, got a list",
			"endpoints[1].models: expected a list of models ({name, aliases, pricing}), got an object",
		}},
		{"model semantics", `endpoints:
- name: a
  address: 127.0.0.1
  port: 1
  models:
  - {name: llama, aliases: [l]}
  - {name: mistral, aliases: [l, ""], pricing: {input: -1, output: 1}}
`, []string{
			`endpoints[0].models[1].aliases[0]: "l" is also declared at endpoints[0].models[0].aliases[0]; a name or alias may appear once per endpoint`,
			"endpoints[0].models[1].aliases[1]: must not be empty",
			"endpoints[0].models[1].pricing.input: must be a number of USD per 1M tokens in 0..1000000, got -1",
		}},
		{"partial pricing", `endpoints:
- {name: a, address: 127.0.0.1, port: 1, models: [{name: m, pricing: {input: 1, output: 2}}]}
- {name: b, address: 127.0.0.1, port: 2, models: [{name: m, pricing: {input: 1, output: 2}}]}
- name: c
  address: 127.0.0.1
  port: 3
  models:
  - {name: m, pricing: {input: 1}}
  - {name: q, pricing: {input: null, output: 0.5}}
`, []string{
			"endpoints[2].models[0].pricing.output: required: a pricing gives both input and output (pricing: {} or null for no price)",
			"endpoints[2].models[1].pricing.input: required: a pricing gives both input and output (pricing: {} or null for no price)",
		}},
		{"types", `endpoints:
- name: 5
  address: [x]
  port: "8000"
  weight: 1.5
  metricsPort: 1e20
  labels: {enabled: true, num: 1, e: null, ok: "yes"}
`, []string{
			"endpoints[0].name: expected a string, got a number",
			"endpoints[0].address: expected a string, got a list",
			"endpoints[0].port: expected an integer, got a string",
			"endpoints[0].metricsPort: 100000000000000000000 is out of range",
			"endpoints[0].weight: expected an integer, got 1.5",
		}},
		{"labels not an object", "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, labels: [a]}\n", []string{
			"endpoints[0].labels: expected an object of label keys and values, got a list",
		}},
		{"weight zero", "endpoints:\n- {name: a, address: 127.0.0.1, port: 1, weight: 0}\n", []string{
			"endpoints[0].weight: must be 1..1000000, got 0 (leave it out for the default 1; remove the endpoint to stop sending it requests)",
		}},
		{"semantic", `endpoints:
- {name: a, address: 127.0.0.1, port: 70000}
- {name: a, address: "[::1]", port: 1, engine: default, metricsPath: metrics}
- {name: b, address: 127.0.0.1, port: 2, labels: {"bad key": v}}
- {name: c, address: 127.0.0.1, port: 2}
`, []string{
			"endpoints[0].port: must be 1..65535, got 70000",
			`endpoints[1].address: invalid address "[::1]": write IPv6 addresses without brackets`,
			`endpoints[1].metricsPath: must start with "/", got "metrics"`,
			`endpoints[1].engine: "default" is reserved; name an engine (e.g. vllm) or leave it empty`,
			`endpoints[1].name: "a" is also the name of endpoints[0]; names must be unique`,
			`endpoints[2].labels["bad key"]: invalid label key: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
			"endpoints[3].port: 127.0.0.1:2 is also the address of endpoints[2]; each endpoint needs its own address:port",
		}},
		{"missing required", "endpoints:\n- {}\n", []string{
			"endpoints[0].name: must not be empty",
			"endpoints[0].address: must not be empty",
			"endpoints[0].port: must be 1..65535, got 0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs, err := Parse([]byte(tt.data))
			require.Error(t, err)
			assert.Nil(t, specs)
			var ve *datastore.ValidationError
			require.True(t, errors.As(err, &ve), "%T", err)
			var got []string
			for _, fe := range ve.Errors {
				got = append(got, fe.Error())
			}
			if tt.name == "types" {
				// Label errors come in map order; check them apart.
				assert.ElementsMatch(t, append(tt.want,
					`endpoints[0].labels["enabled"]: expected a string, got a boolean (quote it: "true")`,
					`endpoints[0].labels["num"]: expected a string, got a number (quote it: "1")`,
					`endpoints[0].labels["e"]: expected a string, got null`,
				), got)
				return
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSecondDocument(t *testing.T) {
	tests := []struct {
		data string
		want int
	}{
		{"a: 1\n", 0},
		{"---\na: 1\n", 0},
		{"# c\n---\na: 1\n", 0},
		{"--- {a: 1}\n---\n", 0},
		{"--- {a: 1}\n--- {b: 1}\n", 2},
		{"a: 1\n---\n", 0},
		{"a: 1\n--- # c\n", 0},
		{"a: 1\n---\n\n# c\nb: 2\n", 2},
		{"a: 1\n--- b: 2\n", 2},
		{"a: |\n  ---\n", 0},
		{"a: 1\n---x\n", 0},
		{"a: 1\n...\n", 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, secondDocument([]byte(tt.data)), "%q", tt.data)
	}
}

// Hostile files are refused before they cost much: aliases that would
// expand past MaxFileBytes, and more endpoints than MaxEndpoints.
func TestParseBounds(t *testing.T) {
	var laughs strings.Builder
	laughs.WriteString("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i, prev := 'b', 'a'; i <= 'j'; i, prev = i+1, i {
		fmt.Fprintf(&laughs, "%c: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n", i, i, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	}
	laughs.WriteString("endpoints: []\n")
	_, err := Parse([]byte(laughs.String()))
	require.ErrorContains(t, err, "once its YAML aliases are expanded")

	var many strings.Builder
	many.WriteString("endpoints:\n")
	for i := range MaxEndpoints + 1 {
		fmt.Fprintf(&many, "- {name: e%d, address: 127.10.%d.%d, port: 8000}\n", i, i/250, i%250+1)
	}
	_, err = Parse([]byte(many.String()))
	require.ErrorContains(t, err, "endpoints: 10001 endpoints exceed the limit of 10000")
}
