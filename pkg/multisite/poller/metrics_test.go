package poller

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// TestMetrics: the four series of the seed, linted, with their closed
// label sets pinned (adding a value is a deliberate change) and every
// value initialised, so a dashboard sees zeros rather than nothing.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	top, err := topology.NewWatcher(topology.Options{Local: local, Registerer: reg})
	require.NoError(t, err)
	p := newPKI(t)
	_, err = New(Options{URL: "https://relay:8443", TLS: p.clientTLS(p.relay.Identity()), Store: sitestore.New(top.Topology()), Topology: top.Topology, Registerer: reg})
	require.NoError(t, err)
	fams, err := reg.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	labels := map[string][]string{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[f.GetName()] = append(labels[f.GetName()], l.GetName()+"="+l.GetValue())
			}
		}
		if len(f.GetMetric()) > 0 && len(f.GetMetric()[0].GetLabel()) == 0 {
			labels[f.GetName()] = []string{}
		}
	}
	for name := range labels {
		slices.Sort(labels[name])
	}
	assert.Equal(t, map[string][]string{
		"grid_signals_poll_total":                     {"result=bad_identity", "result=no_date", "result=ok", "result=too_large", "result=unauthorized", "result=unreachable"},
		"grid_signals_ingest_dropped_total":           {"reason=cap", "reason=parse", "reason=site_mismatch", "reason=skew"},
		"grid_signals_last_success_timestamp_seconds": {},
		"grid_signals_response_bytes":                 {},
		"switchyard_site_topology_reloads_total":      {"result=failure", "result=success"},
		"switchyard_site_topology_sites":              {},
	}, labels)
	assert.Len(t, Results, 6)
	assert.Len(t, signals.DropReasons, 4)
}
