package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

// The multi-site signal path end to end (issue 11): three sites on
// loopback, each with modelsim servers, an EPP in standalone mode and a
// site-relay that scrapes it; the relays poll each other over mutual TLS
// with certificates this test issues (SPIFFE IDs), and every EPP polls its
// own relay.

// site is one site of the grid.
type site struct {
	name       string
	ip         string // the relay's address
	relayPort  int
	adminPort  int
	dir        string
	relay      *proc
	relayArgs  []string
	epp        *cluster
	relayCert  *tlstest.Leaf
	eppCert    *tlstest.Leaf
	eppMetrics string
}

// freePortOn returns a port free on ip a moment ago.
func freePortOn(t *testing.T, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// sitesState is the part of the EPP's /debug/sites the test reads.
type sitesState struct {
	Poller struct {
		LastResult string `json:"lastResult"`
	} `json:"poller"`
	Sites []struct {
		Name      string `json:"name"`
		Providers []struct {
			Name          string   `json:"name"`
			Generation    *uint64  `json:"generation"`
			PublishesLoad bool     `json:"publishesLoad"`
			Ready         *float64 `json:"readyEndpoints"`
		} `json:"providers"`
	} `json:"sites"`
}

func (c *cluster) sites(t *testing.T) sitesState {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.metrics+"/debug/sites", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st sitesState
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// loaded reports the sites whose provider "pool" has a full reading (a
// generation and two ready endpoints).
func (st sitesState) loaded() []string {
	var out []string
	for _, s := range st.Sites {
		for _, p := range s.Providers {
			if p.Name == "pool" && p.Generation != nil && p.Ready != nil && *p.Ready == 2 && p.PublishesLoad {
				out = append(out, s.Name)
			}
		}
	}
	return out
}

func (st sitesState) has(name string) bool {
	for _, s := range st.Sites {
		if s.Name == name && len(s.Providers) > 0 {
			return true
		}
	}
	return false
}

func TestMultisiteSignals(t *testing.T) {
	ca := tlstest.NewCA(t, "grid")
	caDir := t.TempDir()
	caFile := ca.WriteFile(t, caDir)
	const (
		pollInterval = 300 * time.Millisecond
		relayPoll    = 300 * time.Millisecond
	)
	names := []string{"a", "b", "c"}
	sites := map[string]*site{}
	for i, n := range names {
		ip := fmt.Sprintf("127.0.41.%d", i+1)
		s := &site{name: n, ip: ip, relayPort: freePortOn(t, ip), adminPort: freePortOn(t, ip), dir: t.TempDir()}
		s.relayCert = ca.SiteLeaf(t, n, ip)
		s.eppCert = ca.Issue(t, tlsutil.SiteSPIFFEID(tlstest.TrustDomain, n)+"/epp")
		sites[n] = s
	}
	// A peer of site a that serves an oversized body (valid rows of a site
	// "f" the topology does not know): relay a must cut it (G-71).
	fake := fakePeer(t, ca, "127.0.41.9", "f", true)
	// A peer of site a that claims to be site "g" but presents site x's
	// certificate: relay a must refuse it (bad_identity) and relay none of
	// its rows (G-02).
	impostor := fakePeer(t, ca, "127.0.41.10", "x", false)

	// The EPPs: two modelsim servers each, the signals source on.
	for _, n := range names {
		s := sites[n]
		certDir := filepath.Join(s.dir, "epp-tls")
		require.NoError(t, os.MkdirAll(certDir, 0o700))
		cert, key := s.eppCert.WriteFiles(t, certDir)
		var topo strings.Builder
		topo.WriteString("sites:\n")
		for _, m := range names {
			fmt.Fprintf(&topo, "- name: %s\n  cluster: %s\n", m, m)
			if m != n {
				fmt.Fprintf(&topo, "  gateway: 127.0.41.%d:8080\n", strings.Index("abc", m)+1)
			}
		}
		topoFile := filepath.Join(s.dir, "topology.yaml")
		require.NoError(t, os.WriteFile(topoFile, []byte(topo.String()), 0o600))
		s.epp = startClusterWith(t, 2, clusterOpts{noConformance: true, eppArgs: []string{
			"--pool-name", "pool", "--refresh-prometheus-metrics-interval", "200ms",
			"--site-name", n, "--site-cluster", n, "--site-topology-file", topoFile,
			"--signals-relay-url", fmt.Sprintf("https://%s/v1/site/signals", net.JoinHostPort(s.ip, strconv.Itoa(s.relayPort))),
			"--signals-poll-interval", pollInterval.String(), "--signals-poll-timeout", "500ms",
			"--signals-ca-file", caFile, "--signals-cert-file", cert, "--signals-key-file", key,
			"--signals-relay-identity", tlsutil.SiteSPIFFEID(tlstest.TrustDomain, n),
		}})
	}
	// The relays.
	for _, n := range names {
		s := sites[n]
		certDir := filepath.Join(s.dir, "relay-tls")
		require.NoError(t, os.MkdirAll(certDir, 0o700))
		cert, key := s.relayCert.WriteFiles(t, certDir)
		tokenFile := filepath.Join(s.dir, "epp-token")
		require.NoError(t, os.WriteFile(tokenFile, []byte(metricsToken), 0o600))
		var cfg strings.Builder
		fmt.Fprintf(&cfg, `apiVersion: switchyard.ai/v1alpha1
kind: SiteRelayConfig
site: %s
cluster: %s
trustDomain: %s
listenAddress: %s
adminAddress: %s
scrapeInterval: 300ms
scrapeTimeout: 300ms
peerPollInterval: %s
connectTimeout: 250ms
requestTimeout: 250ms
tls: {certFile: %s, keyFile: %s, caFile: %s}
providers:
- name: pool
  metricsConfig: {endpoint: %s/metrics, bearerTokenFile: %s}
peers:
`, n, n, tlstest.TrustDomain, net.JoinHostPort(s.ip, strconv.Itoa(s.relayPort)), net.JoinHostPort(s.ip, strconv.Itoa(s.adminPort)),
			relayPoll, cert, key, caFile, s.epp.metrics, tokenFile)
		for _, m := range names {
			if m != n {
				fmt.Fprintf(&cfg, "- {site: %s, address: %s}\n", m, net.JoinHostPort(sites[m].ip, strconv.Itoa(sites[m].relayPort)))
			}
		}
		if n == "a" {
			fmt.Fprintf(&cfg, "- {site: f, address: %s}\n- {site: g, address: %s}\n", fake, impostor)
		}
		cfgFile := filepath.Join(s.dir, "relay.yaml")
		require.NoError(t, os.WriteFile(cfgFile, []byte(cfg.String()), 0o600))
		s.relayArgs = []string{"--config", cfgFile, "--log-format", "json"}
		s.relay = startProc(t, "relay-"+n, "site-relay", s.relayArgs...)
		s.relay.waitFor(t, regexp.MustCompile(`"msg":"site-relay serving".*"(site)"`))
	}

	t.Run("every EPP's site store converges to all three sites within 3 poll rounds", func(t *testing.T) {
		start := time.Now()
		for _, n := range names {
			require.Eventually(t, func() bool {
				return len(sites[n].epp.sites(t).loaded()) == 3
			}, 15*time.Second, 50*time.Millisecond, "site %s: %+v", n, sites[n].epp.sites(t))
		}
		took := time.Since(start)
		t.Logf("every site store held all three sites' load after %s (scrape %s, relay polls %s, EPP polls %s)", took, "300ms", relayPoll, pollInterval)
		// From the last relay's start, a row takes at most one scrape, one
		// peer poll and one EPP poll to arrive: three rounds of 300 ms, with
		// the 50 ms of the check's own polling and some slack for a loaded
		// machine.
		require.LessOrEqual(t, took, 3*relayPoll+600*time.Millisecond, "converged within 3 poll rounds")
		st := sites["a"].epp.sites(t)
		require.False(t, st.has("f"), "rows of a site the topology does not know never appear")
	})

	t.Run("a relay presenting the wrong identity is refused and its rows never appear", func(t *testing.T) {
		// An EPP of a fourth site, "spy", that expects its relay to be
		// site b's but is pointed at site a's relay: bad_identity on the
		// EPP side; and a relay of site "x" with a certificate of site a is
		// polled by no one successfully.
		s := sites["a"]
		dir := t.TempDir()
		cert, key := ca.Issue(t, tlsutil.SiteSPIFFEID(tlstest.TrustDomain, "b")+"/epp").WriteFiles(t, dir)
		topoFile := filepath.Join(dir, "topology.yaml")
		require.NoError(t, os.WriteFile(topoFile, []byte("sites:\n- {name: b, cluster: b}\n- {name: a, cluster: a, gateway: '127.0.41.1:8080'}\n"), 0o600))
		spy := startClusterWith(t, 1, clusterOpts{noConformance: true, eppArgs: []string{
			"--site-name", "b", "--site-topology-file", topoFile,
			"--signals-relay-url", fmt.Sprintf("https://%s/v1/site/signals", net.JoinHostPort(s.ip, strconv.Itoa(s.relayPort))),
			"--signals-poll-interval", pollInterval.String(),
			"--signals-ca-file", caFile, "--signals-cert-file", cert, "--signals-key-file", key,
			"--signals-relay-identity", tlsutil.SiteSPIFFEID(tlstest.TrustDomain, "b"),
		}})
		require.Eventually(t, func() bool {
			m, err := scrapeWithToken(context.Background(), spy.metrics+"/metrics", spy.token)
			return err == nil && m["grid_signals_poll_total"] != nil && spy.sites(t).Poller.LastResult == "bad_identity"
		}, 10*time.Second, 50*time.Millisecond)
		st := spy.sites(t)
		require.Empty(t, st.loaded(), "no row of the impostor is ingested")

		// Relay side: relay a refuses the impostor claiming to be site g,
		// counts it, and relays none of its rows to its EPP.
		admin := "http://" + net.JoinHostPort(s.ip, strconv.Itoa(s.adminPort)) + "/metrics"
		require.Eventually(t, func() bool {
			return strings.Contains(getText(t, admin), `grid_peer_poll_total{outcome="bad_identity",peer="g"}`)
		}, 10*time.Second, 50*time.Millisecond)
		require.Greater(t, metricLine(t, getText(t, admin), `grid_peer_poll_total{outcome="bad_identity",peer="g"}`), 0.0)
		body := relayBody(t, s, caFile)
		require.NotContains(t, body, `grid_site="g"`, "the impostor's rows are never relayed")
		require.NotContains(t, body, `grid_site="x"`)
		require.Contains(t, body, `grid_site="b"`)
	})

	t.Run("a peer whose body is over the limits is truncated and counted", func(t *testing.T) {
		s := sites["a"]
		admin := "http://" + net.JoinHostPort(s.ip, strconv.Itoa(s.adminPort)) + "/metrics"
		require.Eventually(t, func() bool {
			body := getText(t, admin)
			return strings.Contains(body, `grid_signals_relay_truncated_total{cut="lines",store="peer"}`) &&
				strings.Contains(body, `grid_signals_relay_truncated_total{cut="target",store="peer"}`)
		}, 10*time.Second, 100*time.Millisecond, "relay a counts both cuts")
		body := getText(t, admin)
		for _, cut := range []string{"lines", "target"} {
			v := metricLine(t, body, fmt.Sprintf(`grid_signals_relay_truncated_total{cut=%q,store="peer"}`, cut))
			require.Greater(t, v, 0.0, cut)
		}
		// What relay a sends its EPP stays under 768 KiB, and the EPP
		// ingested it (its sites are still all there).
		m, err := scrapeWithToken(context.Background(), s.epp.metrics+"/metrics", s.epp.token)
		require.NoError(t, err)
		require.LessOrEqual(t, m["grid_signals_response_bytes"].sum, float64(768<<10))
		require.Greater(t, m["grid_signals_response_bytes"].sum, float64(512<<10), "the fake peer's rows were relayed, cut")
		require.Len(t, s.epp.sites(t).loaded(), 3)
	})

	t.Run("a relay that stops answering: unreachable, one log line each way", func(t *testing.T) {
		s := sites["b"]
		failed := func() int {
			return len(s.epp.epp.jsonLogs("Polling the site-relay failed; sites' load is not updated until it recovers"))
		}
		recovered := func() int { return len(s.epp.epp.jsonLogs("Polling the site-relay recovered")) }
		f0, r0 := failed(), recovered()
		require.NoError(t, s.relay.cmd.Process.Signal(syscall.SIGSTOP))
		stopped := true
		defer func() {
			if stopped {
				_ = s.relay.cmd.Process.Signal(syscall.SIGCONT)
			}
		}()
		require.Eventually(t, func() bool { return s.epp.sites(t).Poller.LastResult == "unreachable" }, 10*time.Second, 50*time.Millisecond)
		time.Sleep(5 * pollInterval) // several failed polls
		require.Equal(t, f0+1, failed(), "one line when polling starts failing")
		m, err := scrapeWithToken(context.Background(), s.epp.metrics+"/metrics", s.epp.token)
		require.NoError(t, err)
		require.NotNil(t, m["grid_signals_poll_total"])
		require.NoError(t, s.relay.cmd.Process.Signal(syscall.SIGCONT))
		stopped = false
		require.Eventually(t, func() bool { return s.epp.sites(t).Poller.LastResult == "ok" }, 10*time.Second, 50*time.Millisecond)
		time.Sleep(5 * pollInterval)
		require.Equal(t, r0+1, recovered(), "one line when it recovers")
		require.Equal(t, f0+1, failed())
	})
}

// fakePeer serves, with the certificate of site certSite, site f's rows when
// big — valid rows over the limits a relay keeps toward its EPP: one target
// of 4,200 rows (over 4,096) and 40 more targets, about 850 KiB in all (under
// the 1 MiB a peer poll reads, over the 768 KiB of the body to the EPP) —
// else one row of site g.
func fakePeer(t *testing.T, ca *tlstest.CA, ip, certSite string, big bool) string {
	t.Helper()
	leaf := ca.SiteLeaf(t, certSite, ip)
	rowSite := "f"
	if !big {
		rowSite = "g"
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{leaf.TLS}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS12},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			now := time.Now().Truncate(time.Millisecond)
			var rows []signals.Sample
			add := func(provider string, n int) {
				for i := range n {
					rows = append(rows, signals.Sample{Name: signals.NameAverageRunning, Site: rowSite, Cluster: rowSite, Provider: provider, Value: float64(i), Stamp: now})
				}
			}
			if big {
				add("big", 4200)
				for p := range 40 {
					add(fmt.Sprintf("p%02d", p), 110)
				}
			} else {
				add("pool", 1)
			}
			var body bytes.Buffer
			_, err := signals.Encode(&body, rows, func(string) bool { return true }, signals.Limits{MaxBytes: 1 << 20, MaxLinesPerTarget: 1 << 20})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", signals.ContentType)
			w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
			_, _ = w.Write(body.Bytes())
		}),
	}
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

// relayBody fetches the site's relay's signals as its EPP does (with the
// EPP's client certificate).
func relayBody(t *testing.T, s *site, caFile string) string {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	require.NoError(t, err)
	pool, _, err := tlsutil.ParseCABundle(pem)
	require.NoError(t, err)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{s.eppCert.TLS}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(fmt.Sprintf("https://%s/v1/site/signals", net.JoinHostPort(s.ip, strconv.Itoa(s.relayPort))))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

func metricLine(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("no %s in\n%s", series, body)
	return 0
}
