package datastore

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func validSpec() EndpointSpec {
	return EndpointSpec{Name: "sim-0", Address: "127.0.0.1", Port: 8000}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*EndpointSpec)
		want   string // substring of the error; "" = valid
	}{
		{"valid", func(*EndpointSpec) {}, ""},
		{"valid full", func(s *EndpointSpec) {
			s.Namespace, s.PodName, s.Labels, s.Weight = "default", "pod-a", map[string]string{"app": "vllm", "example.com/tier": "a_b.c"}, 3
			s.MetricsPort, s.MetricsPath, s.Engine = 9090, "/m", "vllm"
		}, ""},
		{"ipv6", func(s *EndpointSpec) { s.Address = "::1" }, ""},
		{"ipv6 zone", func(s *EndpointSpec) { s.Address = "fe80::1%eth0" }, ""},
		{"hostname", func(s *EndpointSpec) { s.Address = "Sim-0.Example.com" }, ""},
		{"empty name", func(s *EndpointSpec) { s.Name = "" }, "name: must not be empty"},
		{"slash name", func(s *EndpointSpec) { s.Name = "a/b" }, "name: invalid name \"a/b\""},
		{"name dash end", func(s *EndpointSpec) { s.Name = "a-" }, "must start and end with a letter or digit"},
		{"long name", func(s *EndpointSpec) { s.Name = strings.Repeat("a", 254) }, "at most 253"},
		{"bad namespace", func(s *EndpointSpec) { s.Namespace = "Default" }, "namespace: invalid namespace"},
		{"bad pod", func(s *EndpointSpec) { s.PodName = "p q" }, "podName: invalid name"},
		{"no address", func(s *EndpointSpec) { s.Address = "" }, "address: must not be empty"},
		{"bracketed", func(s *EndpointSpec) { s.Address = "[::1]" }, "without brackets"},
		{"host:port", func(s *EndpointSpec) { s.Address = "127.0.0.1:80" }, "the port goes in port"},
		{"bad ipv4", func(s *EndpointSpec) { s.Address = "127.0.0.300" }, "not a valid IPv4 address"},
		{"bad host", func(s *EndpointSpec) { s.Address = "a_b" }, "must be an IP address or a DNS host name"},
		{"port 0", func(s *EndpointSpec) { s.Port = 0 }, "port: must be 1..65535, got 0"},
		{"port big", func(s *EndpointSpec) { s.Port = 65536 }, "port: must be 1..65535, got 65536"},
		{"metrics port", func(s *EndpointSpec) { s.MetricsPort = -1 }, "metricsPort: must be 1..65535"},
		{"metrics path", func(s *EndpointSpec) { s.MetricsPath = "metrics" }, "metricsPath: must start with \"/\""},
		{"metrics path query", func(s *EndpointSpec) { s.MetricsPath = "/m?x=1" }, "without query"},
		{"metrics path space", func(s *EndpointSpec) { s.MetricsPath = "/m x" }, "spaces"},
		{"weight negative", func(s *EndpointSpec) { s.Weight = -1 }, "weight: must be 1..1000000"},
		{"weight big", func(s *EndpointSpec) { s.Weight = MaxWeight + 1 }, "weight: must be 1..1000000"},
		{"engine reserved", func(s *EndpointSpec) { s.Engine = "default" }, "engine: \"default\" is reserved"},
		{"engine format", func(s *EndpointSpec) { s.Engine = "v llm" }, "engine: invalid engine name"},
		{"label key", func(s *EndpointSpec) { s.Labels = map[string]string{"bad key": "x"} }, `labels["bad key"]: invalid label key`},
		{"label value", func(s *EndpointSpec) { s.Labels = map[string]string{"app": "a b"} }, `labels["app"]: invalid label value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(&s)
			err := s.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			var ve *ValidationError
			require.True(t, errors.As(err, &ve))
			for _, fe := range ve.Errors {
				assert.NotEmpty(t, fe.Path, "every spec error has a path")
			}
		})
	}
}

func TestValidateSpecs(t *testing.T) {
	specs := []EndpointSpec{
		{Name: "a", Address: "127.0.0.1", Port: 8000},
		{Name: "a", Address: "127.0.0.2", Port: 8000},
		{Name: "b", Address: "127.0.0.1", Port: 8000},
		{Name: "c", Address: "::1", Port: 8000},
		{Name: "d", Address: "0:0::1", Port: 8000},
		{Name: "e", Address: "", Port: 0},
	}
	err := ValidateSpecs(specs)
	require.Error(t, err)
	var ve *ValidationError
	require.True(t, errors.As(err, &ve))
	var got []string
	for _, fe := range ve.Errors {
		got = append(got, fe.Error())
	}
	assert.Equal(t, []string{
		`endpoints[1].name: "a" is also the name of endpoints[0]; names must be unique`,
		`endpoints[2].port: 127.0.0.1:8000 is also the address of endpoints[0]; each endpoint needs its own address:port`,
		`endpoints[4].port: [::1]:8000 is also the address of endpoints[3]; each endpoint needs its own address:port`,
		`endpoints[5].address: must not be empty`,
		`endpoints[5].port: must be 1..65535, got 0`,
	}, got)
	assert.True(t, strings.HasPrefix(err.Error(), "invalid endpoints: 5 errors:\n  endpoints[1].name"))
	require.NoError(t, ValidateSpecs(nil))
}

func TestNormalize(t *testing.T) {
	in := EndpointSpec{Name: "a", Address: "0:0::0001", Port: 1, Labels: map[string]string{"k": "v"}}
	out := normalize(in)
	assert.Equal(t, "::1", out.Address)
	assert.Equal(t, 1, out.Weight)
	assert.Equal(t, "[::1]:1", out.HostPort())
	out.Labels["k"] = "changed"
	assert.Equal(t, "v", in.Labels["k"], "normalize copies the labels")
	assert.Equal(t, "host.example", normalize(EndpointSpec{Address: "HOST.example"}).Address)
	sp := EndpointSpec{Name: "a", Namespace: "ns", Address: "127.0.0.1", Port: 80, MetricsPort: 9090}
	assert.Equal(t, "ns/a", sp.Key())
	assert.Equal(t, "127.0.0.1:9090", sp.MetricsHostPort())
	sp.MetricsPort = 0
	assert.Equal(t, "127.0.0.1:80", sp.MetricsHostPort())
}

// TestCloneModelsEveryField guards cloneModels and sameModels against a
// field added to scheduling.ModelEntry and forgotten there: an entry with
// every field set clones to an equal entry, and changing any one field
// makes the declarations differ.
func TestCloneModelsEveryField(t *testing.T) {
	full := scheduling.ModelEntry{Name: "m", Aliases: []string{"a"}, Pricing: &scheduling.Price{Input: 1, Output: 2}, Unpriced: true}
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		require.False(t, v.Field(i).IsZero(), "set ModelEntry.%s in this test", v.Type().Field(i).Name)
	}
	in := []scheduling.ModelEntry{full}
	out := cloneModels(in)
	assert.Equal(t, in, out)
	assert.True(t, sameModels(in, out))
	assert.NotSame(t, in[0].Pricing, out[0].Pricing, "a deep copy")
	for i := range v.NumField() {
		changed := cloneModels(in)
		f := reflect.ValueOf(&changed[0]).Elem().Field(i)
		f.Set(reflect.Zero(f.Type()))
		assert.False(t, sameModels(in, changed), "a change of ModelEntry.%s is a change", v.Type().Field(i).Name)
	}
}

// TestSameSpecEveryField guards sameSpec against a field added to
// EndpointSpec and forgotten there (a change of it would not publish).
func TestSameSpecEveryField(t *testing.T) {
	full := EndpointSpec{Name: "a", Namespace: "ns", Site: "s", PodName: "p", Address: "127.0.0.1", Port: 1, Labels: map[string]string{"k": "v"},
		Weight: 2, MetricsPort: 3, MetricsPath: "/m", Engine: "vllm", Models: []scheduling.ModelEntry{{Name: "m"}}, Internal: true, NoScrape: true,
		ProviderTPM: 100, ProviderRPM: 10}
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		require.False(t, v.Field(i).IsZero(), "set EndpointSpec.%s in this test", v.Type().Field(i).Name)
	}
	same := full
	assert.True(t, sameSpec(&full, &same))
	for i := range v.NumField() {
		changed := full
		f := reflect.ValueOf(&changed).Elem().Field(i)
		f.Set(reflect.Zero(f.Type()))
		assert.False(t, sameSpec(&full, &changed), "a change of EndpointSpec.%s is a change", v.Type().Field(i).Name)
	}
}
