package config_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// Options override the default bounds.
func TestLoadLimitOptions(t *testing.T) {
	tests := []struct {
		name string
		opts config.Options
		doc  string
		want []string
	}{
		{name: "bytes", opts: config.Options{MaxConfigBytes: 100}, doc: pluginsDoc(3), want: []string{"the document is 186 bytes, more than the limit of 100 bytes"}},
		{name: "expanded bytes", opts: config.Options{MaxConfigBytes: 300}, doc: header + "featureGates: &g [" + strings.Repeat("x", 40) + "]\nplugins: [" + strings.Repeat("*g, ", 5) + "*g]\n",
			want: []string{"the document is more than 300 bytes once its YAML aliases are expanded (the limit is 300 bytes)"}},
		{name: "plugins", opts: config.Options{MaxPlugins: 2}, doc: pluginsDoc(3), want: []string{"plugins: 3 instances exceed the limit of 2"}},
		{name: "profiles", opts: config.Options{MaxProfiles: 1}, doc: profilesDoc(2, 1), want: []string{"schedulingProfiles: 2 profiles exceed the limit of 1"}},
		{name: "references", opts: config.Options{MaxProfilePlugins: 1}, doc: profilesDoc(2, 2), want: []string{
			"schedulingProfiles[0].plugins: 2 plugin references exceed the limit of 1",
			"schedulingProfiles[1].plugins: 2 plugin references exceed the limit of 1",
		}},
		{name: "every limit at once", opts: config.Options{MaxPlugins: 1, MaxProfiles: 1, MaxProfilePlugins: 1}, doc: strings.Replace(profilesDoc(2, 2), "plugins:\n", "plugins:\n- type: queue-scorer\n", 1), want: []string{
			"plugins: 2 instances exceed the limit of 1",
			"schedulingProfiles: 2 profiles exceed the limit of 1",
			"schedulingProfiles[0].plugins: 2 plugin references exceed the limit of 1",
			"schedulingProfiles[1].plugins: 2 plugin references exceed the limit of 1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Registry = plugins.InTree()
			_, err := config.Load([]byte(tt.doc), o)
			require.Error(t, err)
			if diff := cmp.Diff(tt.want, errorStrings(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	// Within the bounds it loads.
	_, err := config.Load([]byte(pluginsDoc(2)), config.Options{Registry: plugins.InTree(), MaxPlugins: 2})
	require.NoError(t, err)
}
