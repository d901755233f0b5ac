package relay

import (
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetrics lints every metric of a relay and pins each label set: the
// series exist from the start, one per closed label value.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	a, b := e.site("a", "127.0.12.1"), e.site("b", "127.0.12.2")
	cfg := e.config(a, "http://127.0.12.1:9/metrics", b)
	_, reg := newRelay(t, cfg, nil)
	families, err := reg.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	labels := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			labels[f.GetName()] = append(labels[f.GetName()], join(ls))
		}
		sort.Strings(labels[f.GetName()])
	}
	var outcomes []string
	for _, o := range Outcomes {
		outcomes = append(outcomes, "outcome="+o+",peer=b")
	}
	sort.Strings(outcomes)
	assert.Equal(t, outcomes, labels[MetricPeerPolls])
	assert.Equal(t, []string{"cut=lines,store=local", "cut=lines,store=peer", "cut=target,store=local", "cut=target,store=peer"}, labels[MetricTruncated])
	assert.Equal(t, []string{"client=local_epp", "client=peer", "client=refused"}, labels[MetricRequests])
	assert.Equal(t, []string{"peer=b,reason=cap", "peer=b,reason=parse", "peer=b,reason=site_mismatch", "peer=b,reason=skew"}, labels[MetricPeerDropped])
	assert.Len(t, labels[MetricScrapes], len(scrapeResults))
	assert.Equal(t, []string{"provider=pool"}, labels[MetricMetricsAvail])
	assert.Equal(t, []string{"purpose=relay_server,result=failure", "purpose=relay_server,result=success"}, labels["switchyard_tls_certificate_reloads_total"])
	assert.Equal(t, []string{"purpose=relay_server"}, labels["switchyard_tls_certificate_expiry_timestamp_seconds"])
	assert.Equal(t, []string{"purpose=relay_server,result=failure", "purpose=relay_server,result=success"}, labels["switchyard_tls_ca_bundle_reloads_total"])
	assert.Equal(t, []string{""}, labels[MetricUnattributed])
}

func join(ls []string) string {
	out := ""
	for i, l := range ls {
		if i > 0 {
			out += ","
		}
		out += l
	}
	return out
}
