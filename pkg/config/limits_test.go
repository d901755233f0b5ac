package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// pluginsDoc declares n queue scorers and nothing else.
func pluginsDoc(n int) string {
	var b strings.Builder
	b.WriteString(header + "plugins:\n")
	for i := range n {
		fmt.Fprintf(&b, "- {type: queue-scorer, name: q%d}\n", i)
	}
	return b.String()
}

// profilesDoc declares one picker and n profiles referring to it refs
// times each.
func profilesDoc(n, refs int) string {
	var b strings.Builder
	b.WriteString(header + "plugins:\n- type: max-score-picker\nschedulingProfiles:\n")
	for i := range n {
		fmt.Fprintf(&b, "- name: p%d\n  plugins:\n", i)
		for range refs {
			b.WriteString("  - pluginRef: max-score-picker\n")
		}
	}
	return b.String()
}

// Configurations are bounded before anything is built, with errors that
// name the field and the limit; defaults apply with zero Options.
func TestLoadRefusesOversizedConfigurations(t *testing.T) {
	padded := header + "# " + strings.Repeat("x", config.DefaultMaxConfigBytes) + "\n"
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "document over 1 MiB",
			doc:  padded,
			want: []string{fmt.Sprintf("the document is %d bytes, more than the limit of 1048576 bytes", len(padded))},
		},
		{
			name: "more plugins than the limit",
			doc:  pluginsDoc(config.DefaultMaxPlugins + 1),
			want: []string{"plugins: 513 instances exceed the limit of 512"},
		},
		{
			name: "more profiles than the limit",
			doc:  profilesDoc(config.DefaultMaxProfiles+1, 1),
			want: []string{"schedulingProfiles: 65 profiles exceed the limit of 64"},
		},
		{
			name: "more references in one profile than the limit",
			doc:  profilesDoc(1, config.DefaultMaxProfilePlugins+1),
			want: []string{"schedulingProfiles[0].plugins: 129 plugin references exceed the limit of 128"},
		},
		{
			// Nine levels of ten aliases: 10^9 leaves from 700 bytes.
			name: "billion laughs",
			doc:  billionLaughs(),
			want: []string{"the document is more than 1048576 bytes once its YAML aliases are expanded (the limit is 1048576 bytes)"},
		},
		{
			// One 64 KiB string repeated through 2,000 aliases: 128 MiB of
			// JSON from a 70 KiB document, without excessive aliasing.
			name: "a large scalar behind many aliases",
			doc:  header + "plugins:\n- type: queue-scorer\n  name: &big " + strings.Repeat("x", 64<<10) + "\nfeatureGates: [" + strings.Repeat("*big, ", 2000) + "*big]\n",
			want: []string{"the document is more than 1048576 bytes once its YAML aliases are expanded (the limit is 1048576 bytes)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := load(t, tt.doc)
			require.Error(t, err)
			if diff := cmp.Diff(tt.want, errorStrings(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			require.Less(t, time.Since(start), 5*time.Second, "refusing took too long")
		})
	}
}

func billionLaughs() string {
	var b strings.Builder
	b.WriteString(header + "featureGates: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\nflowControl:\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// Anchors and aliases that stay small load as before.
func TestLoadAcceptsModestAliases(t *testing.T) {
	doc := header + "plugins:\n- type: prefix-cache-scorer\n  name: a\n  parameters: &p {blockSizeTokens: 32}\n- type: approx-prefix-cache-producer\n  parameters: *p\n"
	_, err := load(t, doc)
	require.NoError(t, err)
}

// Limits at the boundary load; a file over the size limit is refused
// without being read whole, with Load's message.
func TestLoadLimitsBoundary(t *testing.T) {
	_, err := load(t, pluginsDoc(config.DefaultMaxPlugins))
	require.NoError(t, err)
	// 64 profiles without a handler for them: refused, but not for the limit.
	_, err = load(t, profilesDoc(config.DefaultMaxProfiles, 1))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "exceed the limit")
	// One profile with 128 references.
	doc := pluginsDoc(config.DefaultMaxProfilePlugins-1) + "- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n"
	for i := range config.DefaultMaxProfilePlugins - 1 {
		doc += fmt.Sprintf("  - pluginRef: q%d\n", i)
	}
	doc += "  - pluginRef: max-score-picker\n"
	_, err = load(t, doc)
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "big.yaml")
	big := header + "# " + strings.Repeat("x", config.DefaultMaxConfigBytes) + "\n"
	require.NoError(t, os.WriteFile(path, []byte(big), 0o600))
	_, err = config.LoadFile(path, config.Options{Registry: plugins.InTree()})
	require.Error(t, err)
	require.Equal(t, []string{fmt.Sprintf("the document is %d bytes, more than the limit of 1048576 bytes", len(big))}, errorStrings(t, err))
}
