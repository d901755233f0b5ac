package server

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

// relayFixture is a relay-like HTTPS server on loopback requiring a client
// certificate, and the files the EPP needs to poll it.
type relayFixture struct {
	url                       string
	caFile, certFile, keyFile string
	identity                  tlsutil.Identity
}

func startSignalsRelay(t *testing.T, body func() string) relayFixture {
	t.Helper()
	ca := tlstest.NewCA(t, "grid")
	relay := ca.SiteLeaf(t, "site-a")
	epp := ca.Issue(t, "spiffe://"+tlstest.TrustDomain+"/epp/site-a")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || tlsutil.MatchIdentity(r.TLS.PeerCertificates[0], []tlsutil.Identity{epp.Identity()}) < 0 {
			http.Error(w, "not the EPP", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", signals.ContentType)
		w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		_, _ = io.WriteString(w, body())
	}))
	srv.TLS = tlsutil.MutualServerConfig(tlsutil.Static(relay.TLS), nil)
	srv.TLS.Certificates = []tls.Certificate{relay.TLS}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	certFile, keyFile := epp.WriteFiles(t, dir)
	return relayFixture{url: srv.URL + signals.Path, caFile: ca.WriteFile(t, t.TempDir()), certFile: certFile, keyFile: keyFile, identity: relay.Identity()}
}

func (f relayFixture) config(topologyFile string) *MultisiteConfig {
	return &MultisiteConfig{
		Site: "site-a", Cluster: "cluster-a", TopologyFile: topologyFile,
		RelayURL: f.url, PollInterval: 50 * time.Millisecond,
		CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile, RelayIdentity: f.identity,
	}
}

func signalsRow(name, site, cluster, provider string, v float64) string {
	ms := time.Now().UnixMilli()
	if provider == "" {
		return fmt.Sprintf("%s{grid_site=%q} %v %d\n", name, site, v, ms)
	}
	return fmt.Sprintf("%s{grid_site=%q,grid_cluster=%q,grid_provider=%q} %v %d\n", name, site, cluster, provider, v, ms)
}

const topologyTwoSites = `sites:
- {name: site-a, cluster: cluster-a, models: [m]}
- {name: site-b, cluster: cluster-b, gateway: "127.0.0.2:9"}   # nothing listens: a refused probe
`

// TestMultisiteSignals: with the multi-site source on, the server polls
// the relay and its site store holds the relayed sites (reachable with
// SiteSnapshot and, behind the metrics port's authentication,
// /debug/sites); remote sites never become endpoints: the datastore and
// the scraper's targets keep the local pool only.
func TestMultisiteSignals(t *testing.T) {
	body := func() string {
		return signalsRow(signals.NameAverageRunning, "site-a", "cluster-a", "pool", 2) +
			signalsRow(signals.NamePublishesLoad, "site-a", "cluster-a", "pool", 1) +
			signalsRow(signals.NamePeerRoundEnd, "site-b", "", "", float64(time.Now().Unix())) +
			signalsRow(signals.NamePeerRounds, "site-b", "", "", 3) +
			signalsRow(signals.NameAverageRunning, "site-b", "cluster-b", "pool", 5) +
			signalsRow(signals.NamePublishesLoad, "site-b", "cluster-b", "pool", 0) +
			signalsRow(signals.NameAverageRunning, "site-b", "cluster-b", "quiet", 1) +
			signalsRow(signals.NameAverageRunning, "site-x", "cluster-x", "pool", 5)
	}
	f := startSignalsRelay(t, body)
	topo := filepath.Join(t.TempDir(), "topology.yaml")
	require.NoError(t, os.WriteFile(topo, []byte(topologyTwoSites), 0o600))
	const token = "a-test-token-of-32-bytes-0123456"
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 2), Multisite: f.config(topo), MetricsTokenFile: tokenFile})

	require.Eventually(t, func() bool {
		sn := s.SiteSnapshot()
		b, ok := sn.Site("site-b")
		return ok && len(b.Providers) == 2
	}, 10*time.Second, 10*time.Millisecond)
	sn := s.SiteSnapshot()
	a, _ := sn.Site("site-a")
	require.Len(t, a.Providers, 1)
	assert.Equal(t, 2.0, a.Providers[0].Running.Value)
	_, ok := sn.Site("site-x")
	assert.False(t, ok, "a site the topology does not hold")
	assert.Equal(t, 2, s.SiteTopology().Len())
	// The poll's result is recorded just after its rows are published.
	require.Eventually(t, func() bool {
		st, ok := s.SignalsStatus()
		return ok && string(st.LastResult) == "ok"
	}, 5*time.Second, 10*time.Millisecond, "the last poll's result")

	// Remote sites are not endpoints.
	assert.Equal(t, 2, s.Store().Snapshot().Len())
	targets, _ := s.Store().Targets()
	for _, tg := range targets {
		assert.True(t, strings.HasPrefix(tg.Spec.Name, "sim-"), tg.Key)
		assert.Empty(t, tg.Spec.Site)
	}

	// /debug/sites, behind the token like /debug/endpoints.
	code, _ := get(t, s, "/debug/sites", "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, doc := get(t, s, "/debug/sites", token)
	require.Equal(t, http.StatusOK, code)
	var state SitesState
	require.NoError(t, json.Unmarshal([]byte(doc), &state))
	assert.True(t, state.Enabled)
	require.Len(t, state.Sites, 2)
	assert.Equal(t, "site-a", state.Sites[0].Name)
	assert.True(t, state.Sites[0].Local)
	assert.Equal(t, []string{"m"}, state.Sites[0].Models)
	assert.Equal(t, "127.0.0.2:9", state.Sites[1].Gateway)
	require.NotNil(t, state.Sites[1].Rounds)
	assert.Equal(t, uint64(3), *state.Sites[1].Rounds)
	require.Len(t, state.Sites[1].Providers, 2)
	byName := map[string]ProviderState{}
	for _, p := range state.Sites[1].Providers {
		byName[p.Name] = p
	}
	pool := byName["pool"]
	require.NotNil(t, pool.Running)
	assert.Equal(t, 5.0, *pool.Running)
	assert.Nil(t, pool.Queue, "not received")
	// publishesLoad is the row's value, 0 included, and absent without a
	// row (G-47).
	require.Len(t, state.Sites[0].Providers, 1)
	if pl := state.Sites[0].Providers[0].PublishesLoad; assert.NotNil(t, pl, "site-a pool") {
		assert.Equal(t, 1.0, *pl)
	}
	if pl := pool.PublishesLoad; assert.NotNil(t, pl, "site-b pool") {
		assert.Equal(t, 0.0, *pl)
	}
	assert.Nil(t, byName["quiet"].PublishesLoad, "no row: unknown")
	assert.Contains(t, doc, `"publishesLoad": 0`)
	assert.Equal(t, "ok", string(state.Poller.LastResult))

	// The grid_signals_* series are on /metrics.
	_, metrics := get(t, s, "/metrics", token)
	assert.Contains(t, metrics, `grid_signals_poll_total{result="ok"}`)
	assert.Contains(t, metrics, `grid_signals_ingest_dropped_total{reason="site_mismatch"}`)
	assert.Contains(t, metrics, "switchyard_site_topology_sites 2")
	// The signals client certificate and CA bundle have series of their
	// own, apart from the serving certificate's.
	assert.Contains(t, metrics, `switchyard_tls_certificate_expiry_timestamp_seconds{purpose="signals_client"}`)
	assert.Contains(t, metrics, `switchyard_tls_ca_bundle_reloads_total{purpose="signals_client",result=`)
	// loadAge is judged on load rows only; lastRowAge on any row.
	assert.NotEmpty(t, pool.LoadAge)
	assert.NotEmpty(t, pool.LastRowAge)

	// The topology file is watched: a removed site leaves the store.
	require.NoError(t, os.WriteFile(topo, []byte("sites: []\n"), 0o600))
	require.Eventually(t, func() bool { _, ok := s.SiteSnapshot().Site("site-b"); return !ok }, 15*time.Second, 10*time.Millisecond)
	assert.Equal(t, 2, s.Store().Snapshot().Len(), "local endpoints untouched")
}

// TestMultisiteOff: without the configuration nothing multi-site runs.
func TestMultisiteOff(t *testing.T) {
	const token = "a-test-token-of-32-bytes-0123456"
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), MetricsTokenFile: tokenFile})
	assert.Nil(t, s.SiteSnapshot())
	assert.Nil(t, s.SiteTopology())
	assert.Nil(t, s.SiteStates())
	_, ok := s.SignalsStatus()
	assert.False(t, ok)
	code, doc := get(t, s, "/debug/sites", token)
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"enabled": false}`, doc)
	_, metrics := get(t, s, "/metrics", token)
	assert.NotContains(t, metrics, "grid_signals_poll_total")
	assert.NotContains(t, metrics, "grid_route_site_ceiling")
}

func TestMultisiteConfigErrors(t *testing.T) {
	f := startSignalsRelay(t, func() string { return "" })
	badTopo := filepath.Join(t.TempDir(), "topology.yaml")
	require.NoError(t, os.WriteFile(badTopo, []byte("sites: [{name: b, cluster: c}]\n"), 0o600))
	for _, tc := range []struct {
		name   string
		mutate func(*MultisiteConfig)
		want   []string
	}{
		{"names", func(m *MultisiteConfig) { m.Site, m.Cluster = "Site A", "" }, []string{"--site-name: ", "--site-cluster: "}},
		{"url", func(m *MultisiteConfig) { m.RelayURL = "http://relay" }, []string{"--signals-relay-url: ", "https"}},
		{"no client certificate", func(m *MultisiteConfig) { m.CertFile = "" }, []string{"--signals-cert-file and --signals-key-file"}},
		{"missing key file", func(m *MultisiteConfig) { m.KeyFile = filepath.Join(t.TempDir(), "none") }, []string{"--signals-cert-file, --signals-key-file: "}},
		{"no identity", func(m *MultisiteConfig) { m.RelayIdentity = tlsutil.Identity{} }, []string{"--signals-relay-identity: one of spiffeID or sha256 is required"}},
		{"SPIFFE ID without a CA", func(m *MultisiteConfig) { m.CAFile = "" }, []string{"--signals-ca-file: required with a SPIFFE ID"}},
		{"bad CA file", func(m *MultisiteConfig) { m.CAFile = f.certFile + ".none" }, []string{"--signals-ca-file: "}},
		{"negative interval", func(m *MultisiteConfig) { m.PollInterval = -time.Second }, []string{"--signals-poll-interval: must be positive"}},
		{"invalid topology", func(m *MultisiteConfig) { m.TopologyFile = badTopo }, []string{"--site-topology-file: ", "sites[0].gateway: required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := f.config("")
			tc.mutate(m)
			_, err := New(Config{EndpointsFile: sims(t, 1), Multisite: m, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
