package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// TestScrapeIntervalReachesPlugins: Options.ScrapeInterval reaches the
// plugins' handles, nested strategy instances included: the real
// engine-load-picker, configured directly or as a strategy-picker's
// strategy, takes it as its scrapeInterval default, and warns (a loader
// warning under its label) when its configured value differs; a host that
// does not say leaves the plugin's own default (50ms).
func TestScrapeIntervalReachesPlugins(t *testing.T) {
	doc := func(typ, params string) string {
		return header + "plugins:\n- name: p\n  type: " + typ + "\n  parameters: " + params + `
schedulingProfiles:
- name: default
  plugins: [{pluginRef: p}]
`
	}
	tests := []struct {
		name, typ, params string
		host              time.Duration
		want              string // in the effective parameters
		warning           string
	}{
		{name: "direct", typ: "engine-load-picker", params: "{}", host: 20 * time.Millisecond, want: `"scrapeInterval":"20ms"`},
		{name: "as a strategy", typ: "strategy-picker", params: "{strategy: EngineLoad}", host: 20 * time.Millisecond, want: `"scrapeInterval":"20ms"`},
		{name: "configured", typ: "engine-load-picker", params: "{scrapeInterval: 1s}", host: 20 * time.Millisecond, want: `"scrapeInterval":"1s"`,
			warning: `plugins[0] "p" (engine-load-picker): scrapeInterval 1s differs from the EPP's metrics scrape interval 20ms`},
		{name: "configured as the host's", typ: "engine-load-picker", params: "{scrapeInterval: 20ms}", host: 20 * time.Millisecond, want: `"scrapeInterval":"20ms"`},
		{name: "host unknown", typ: "engine-load-picker", params: "{}", want: `"scrapeInterval":"50ms"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := loadWith(t, doc(tt.typ, tt.params), config.Options{Registry: plugins.InTree(), ScrapeInterval: tt.host})
			require.NoError(t, err)
			require.Contains(t, string(l.Config.Plugins[0].Parameters), tt.want)
			var warned []string
			for _, w := range l.Warnings {
				if strings.Contains(w, "scrapeInterval") {
					warned = append(warned, w)
				}
			}
			if tt.warning == "" {
				require.Empty(t, warned)
				return
			}
			require.Len(t, warned, 1, "%v", l.Warnings)
			require.Contains(t, warned[0], tt.warning)
		})
	}
}
