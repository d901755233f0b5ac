package relay

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// TestLoopbackThreeSitesAndAnImpostor runs four relays with Run (real
// clocks, real loops) on their own loopback addresses, each scraping an
// EPP metrics port served from a real pkg/metrics registry. Sites a, b and
// c poll each other; d polls them too, and a lists d as a peer, but d's
// certificate names site "evil": every EPP view converges to the three
// real sites within three poll rounds, d is refused both ways and counted,
// and none of its rows reaches an EPP.
func TestLoopbackThreeSitesAndAnImpostor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four relays for about a second")
	}
	e := newEnv(t)
	a, b, c := e.site("a", "127.0.20.1"), e.site("b", "127.0.20.2"), e.site("c", "127.0.20.3")
	d := e.site("d", "127.0.20.4")
	// d presents a certificate of another site.
	evil := e.ca.SiteLeaf(t, "evil", d.ip)
	d.certFile, d.keyFile = evil.WriteFiles(t, t.TempDir())

	const poll = 250 * time.Millisecond
	eppLoad := map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}
	relays := map[string]*Relay{}
	regs := map[string]*prometheus.Registry{}
	peersOf := map[string][]*testSite{"a": {b, c, d}, "b": {a, c}, "c": {a, b}, "d": {a, b, c}}
	for _, s := range []*testSite{a, b, c, d} {
		epp := newStubEPP(t, s.ip, "pool")
		epp.load(eppLoad[s.name], 1, 2, 0.25)
		cfg := e.config(s, epp.url, peersOf[s.name]...)
		cfg.ScrapeInterval, cfg.ScrapeTimeout = 100*time.Millisecond, 100*time.Millisecond
		cfg.PeerPollInterval, cfg.RequestTimeout, cfg.ConnectTimeout = poll, poll, poll
		r, reg := newRelay(t, cfg, nil)
		relays[s.name], regs[s.name] = r, reg
		start(t, r, true)
	}
	begin := time.Now()
	for _, s := range []*testSite{a, b, c} {
		require.Eventually(t, func() bool {
			res, resp := e.fetch(relays[s.name], s, s.epp)
			if resp.StatusCode != http.StatusOK {
				return false
			}
			sites := sitesOf(res)
			for _, want := range []string{"a", "b", "c"} {
				if rowsOf(res, want)[signals.NameReadyEndpoints+"/pool"].Value != float64(eppLoad[want]) {
					return false
				}
			}
			return len(sites) == 3 || (s == a && len(sites) == 4)
		}, 3*poll+5*time.Second, 10*time.Millisecond, "site %s did not converge", s.name)
	}
	t.Logf("converged in %v (poll interval %v)", time.Since(begin), poll)

	// Let a few more rounds run, then check d never got through.
	time.Sleep(3 * poll)
	for _, s := range []*testSite{a, b, c} {
		res, _ := e.fetch(relays[s.name], s, s.epp)
		for _, row := range res.Samples {
			if row.Site == "d" || row.Site == "evil" {
				assert.False(t, signals.IsProviderSeries(row.Name), "%s relayed a row of the impostor: %+v", s.name, row)
			}
		}
	}
	assert.Positive(t, metricValue(t, regs["a"], MetricPeerPolls, map[string]string{"peer": "d", "outcome": OutcomeBadIdentity}))
	assert.Equal(t, 0.0, metricValue(t, regs["a"], MetricPeerPolls, map[string]string{"peer": "d", "outcome": OutcomeOK}))
	for _, s := range []string{"a", "b", "c"} {
		assert.Positive(t, metricValue(t, regs[s], MetricRequests, map[string]string{"client": ClientRefused}), "%s refused d", s)
		assert.Positive(t, metricValue(t, regs["d"], MetricPeerPolls, map[string]string{"peer": s, "outcome": OutcomeUnauthorized}), "d is told it is refused by %s", s)
	}
	assert.Positive(t, metricValue(t, regs["b"], MetricPeerPolls, map[string]string{"peer": "a", "outcome": OutcomeOK}))

	// The admin port.
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": MetricPeerPolls, "/status": `"MetricsAvailable"`} {
		resp, err := http.Get("http://" + relays["a"].AdminAddr() + path)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, string(raw), want, path)
	}
	st := relays["a"].Status()
	require.Len(t, st.Peers, 3)
	assert.Equal(t, OutcomeBadIdentity, st.Peers[2].LastOutcome)
	assert.Contains(t, st.Peers[2].Message, tlsutil.SiteSPIFFEID("switchyard.test", "evil"))
	assert.True(t, strings.HasPrefix(st.Peers[0].URL, "https://127.0.20.2:"))
}
