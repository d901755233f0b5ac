package conventions

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// TestMetricsLint loads every shipped configuration into one registry (as
// a reload would) and lints every metric the framework and plugins
// register: names, units, help texts.
func TestMetricsLint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	docs := [][]byte{configfiles.Default}
	entries, err := fs.ReadDir(configfiles.Samples, "samples")
	require.NoError(t, err)
	for _, e := range entries {
		data, err := fs.ReadFile(configfiles.Samples, "samples/"+e.Name())
		require.NoError(t, err)
		docs = append(docs, data)
	}
	for _, doc := range docs {
		// The framework resolves each plugin's duration series when it
		// builds a profile, so every vector has series to lint.
		_, err := config.Load(doc, config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: reg, Seed: 1})
		require.NoError(t, err)
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	names := make([]string, 0, len(families))
	for _, f := range families {
		names = append(names, f.GetName())
	}
	t.Logf("metrics: %s", strings.Join(names, ", "))
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}
