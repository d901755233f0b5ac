package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
	Sites []siteState `json:"sites"`
}

type siteState struct {
	Name          string          `json:"name"`
	Rounds        *uint64         `json:"rounds"`
	ProviderCount int             `json:"providerCount"`
	Providers     []providerState `json:"providers"`
}

type providerState struct {
	Name          string   `json:"name"`
	Generation    *uint64  `json:"generation"`
	PublishesLoad *float64 `json:"publishesLoad"`
	Ready         *float64 `json:"readyEndpoints"`
	Running       *float64 `json:"averageRunningRequests"`
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

// String shows the view with its values (for failure messages).
func (st sitesState) String() string {
	b, _ := json.Marshal(st)
	return string(b)
}

func (st sitesState) site(name string) (siteState, bool) {
	for _, s := range st.Sites {
		if s.Name == name {
			return s, true
		}
	}
	return siteState{}, false
}

func (s siteState) provider(name string) (providerState, bool) {
	for _, p := range s.Providers {
		if p.Name == name {
			return p, true
		}
	}
	return providerState{}, false
}

// loaded reports the sites whose provider "pool" has a full reading (a
// generation, two ready endpoints, publishes_load 1) and whose provider
// "quiet" (no metricsConfig) says publishes_load 0.
func (st sitesState) loaded() []string {
	var out []string
	for _, s := range st.Sites {
		p, ok := s.provider("pool")
		q, okq := s.provider("quiet")
		if ok && okq && p.Generation != nil && p.Ready != nil && *p.Ready == 2 && p.PublishesLoad != nil && *p.PublishesLoad == 1 &&
			q.PublishesLoad != nil && *q.PublishesLoad == 0 {
			out = append(out, s.Name)
		}
	}
	return out
}

// seriesAt reads a Prometheus text endpoint into series -> value, the
// series written name{label="value",...} with the labels sorted by name.
func seriesAt(t *testing.T, url, token string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, url)
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			out[series(name, labels...)] = v
		}
	}
	return out
}

// series names one series: name{label="value",...}, labels (name, value
// pairs) sorted by name.
func series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	pairs := make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// value returns a series that must exist.
func value(t *testing.T, m map[string]float64, name string, labels ...string) float64 {
	t.Helper()
	k := series(name, labels...)
	v, ok := m[k]
	require.True(t, ok, "no series %s", k)
	return v
}

func (s *site) admin() string { return "http://" + net.JoinHostPort(s.ip, strconv.Itoa(s.adminPort)) }

// relayMetrics reads the relay's own metrics (admin port).
func (s *site) relayMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	return seriesAt(t, s.admin()+"/metrics", "")
}

// rounds is the relay's grid_peer_poll_rounds_total: the peer poll rounds
// it completed, each trying every peer.
func (s *site) rounds(t *testing.T) float64 {
	t.Helper()
	return value(t, s.relayMetrics(t), "grid_peer_poll_rounds_total")
}

// awaitRounds waits until the relay has completed n rounds after from, and
// returns its count. Convergence is judged in rounds, not in time; the
// deadline only keeps a broken relay from hanging the test.
func (s *site) awaitRounds(t *testing.T, from float64, n int) float64 {
	t.Helper()
	var r float64
	require.Eventually(t, func() bool {
		r = s.rounds(t)
		return r >= from+float64(n)
	}, 60*time.Second, 20*time.Millisecond, "relay %s: %v rounds, waiting for %v", s.name, r, from+float64(n))
	return r
}

// eppMetrics reads the EPP's /metrics.
func (c *cluster) eppMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	return seriesAt(t, c.metrics+"/metrics", c.token)
}

// awaitPolls waits until the EPP's grid_signals_poll_total{result} is at
// least n, and returns the EPP's metrics then.
func (c *cluster) awaitPolls(t *testing.T, result string, n float64) map[string]float64 {
	t.Helper()
	var m map[string]float64
	require.Eventually(t, func() bool {
		m = c.eppMetrics(t)
		return m[series("grid_signals_poll_total", "result", result)] >= n
	}, 60*time.Second, 20*time.Millisecond, "grid_signals_poll_total{result=%q} never reached %v", result, n)
	return m
}

// pollResults are the EPP's grid_signals_poll_total results.
var pollResults = []string{"ok", "unreachable", "unauthorized", "too_large", "no_date", "bad_identity"}

// peerOutcomes are the relay's grid_peer_poll_total outcomes.
var peerOutcomes = []string{"ok", "unreachable", "bad_identity", "unauthorized", "bad_status", "too_large", "no_date"}

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
	// A peer of site a, "d", in EPP a's topology, that never answers (a
	// closed port): relay a tries it every round and never hears from it.
	silent := net.JoinHostPort("127.0.41.4", strconv.Itoa(freePortOn(t, "127.0.41.4")))

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
		if n == "a" {
			topo.WriteString("- name: d\n  cluster: d\n  gateway: 127.0.41.4:8080\n")
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
- name: quiet   # no metricsConfig: publishes no load (G-47 a)
peers:
`, n, n, tlstest.TrustDomain, net.JoinHostPort(s.ip, strconv.Itoa(s.relayPort)), net.JoinHostPort(s.ip, strconv.Itoa(s.adminPort)),
			relayPoll, cert, key, caFile, s.epp.metrics, tokenFile)
		for _, m := range names {
			if m != n {
				fmt.Fprintf(&cfg, "- {site: %s, address: %s}\n", m, net.JoinHostPort(sites[m].ip, strconv.Itoa(sites[m].relayPort)))
			}
		}
		if n == "a" {
			fmt.Fprintf(&cfg, "- {site: f, address: %s}\n- {site: g, address: %s}\n- {site: d, address: %s}\n", fake, impostor, silent)
		}
		cfgFile := filepath.Join(s.dir, "relay.yaml")
		require.NoError(t, os.WriteFile(cfgFile, []byte(cfg.String()), 0o600))
		s.relayArgs = []string{"--config", cfgFile, "--log-format", "json"}
		s.relay = startProc(t, "relay-"+n, "site-relay", s.relayArgs...)
		s.relay.waitFor(t, regexp.MustCompile(`"msg":"site-relay serving".*"(site)"`))
	}

	// The moment every relay's rounds are counted from: every relay has
	// its own site's full reading (a scrape of its EPP that saw both
	// endpoints ready), shown by its own EPP, which reads its own site
	// from the relay too. A scrape that merely succeeded is not enough:
	// an EPP that has not yet scraped its servers reports 0 ready.
	for _, n := range names {
		s := sites[n]
		require.Eventually(t, func() bool {
			return value(t, s.relayMetrics(t), "grid_relay_scrapes_total", "provider", "pool", "result", "ok") >= 1
		}, 60*time.Second, 20*time.Millisecond, "relay %s never scraped its EPP", n)
		var st sitesState
		require.Eventually(t, func() bool {
			st = s.epp.sites(t)
			return slices.Contains(st.loaded(), n)
		}, 60*time.Second, 20*time.Millisecond, "EPP %s never read its own site's full reading from its relay: %v", n, st)
	}
	// From then on, a peer's row takes one ok poll that started after the
	// start to reach a relay; the poll in flight at the start may have
	// begun before it, so the bound is the relay's round in which its
	// second ok poll of every peer since the start ended. Rounds in which
	// a poll failed (a peer slow beyond requestTimeout on a loaded machine)
	// do not count against it: they are in the ok counts' difference.
	start := map[string]float64{}
	okStart := map[string]map[string]float64{}
	for _, n := range names {
		m := sites[n].relayMetrics(t)
		start[n] = value(t, m, "grid_peer_poll_rounds_total")
		okStart[n] = map[string]float64{}
		for _, p := range names {
			if p != n {
				okStart[n][p] = value(t, m, "grid_peer_poll_total", "peer", p, "outcome", "ok")
			}
		}
	}
	// settled[n] is that round of relay n, measured by the first subtest;
	// start+2 (the earliest it can be) stands in if that subtest fails
	// before measuring it, so the second still runs.
	settled := map[string]float64{}
	for _, n := range names {
		settled[n] = start[n] + 2
	}

	t.Run("every EPP's site store converges to all three sites within 2 ok polls of every peer", func(t *testing.T) {
		for _, n := range names {
			s := sites[n]
			require.Eventually(t, func() bool {
				m := s.relayMetrics(t)
				for p, ok := range okStart[n] {
					if value(t, m, "grid_peer_poll_total", "peer", p, "outcome", "ok") < ok+2 {
						return false
					}
				}
				return true
			}, 60*time.Second, 20*time.Millisecond, "relay %s: never polled every peer ok twice", n)
			// A snapshot's counters are not read at one instant: the round
			// count comes from a later snapshot, so it is at least the
			// round that applied the second ok poll.
			settled[n] = value(t, s.relayMetrics(t), "grid_peer_poll_rounds_total")
			require.GreaterOrEqual(t, settled[n], start[n]+2, "relay %s: two ok polls of a peer take two rounds", n)
			// The EPP's view carries the relay round it was served at
			// (the peers' rounds): a view from round settled[n] or later
			// must hold all three sites. The EPP's own poll lag (a loaded
			// machine, a large body) does not count; the deadline only
			// keeps a broken EPP from hanging the test.
			deadline := time.Now().Add(60 * time.Second)
			for {
				st := s.epp.sites(t)
				if len(st.loaded()) == 3 {
					t.Logf("site %s: converged by relay round %v (start %v)", n, settled[n], start[n])
					break
				}
				served := -1.0
				for _, p := range names {
					if ss, ok := st.site(p); p != n && ok && ss.Rounds != nil && (served < 0 || float64(*ss.Rounds) < served) {
						served = float64(*ss.Rounds)
					}
				}
				require.Less(t, served, settled[n], "site %s: a view served at relay round %v, past %v (start %v), has not converged: %s", n, served, settled[n], start[n], st)
				require.True(t, time.Now().Before(deadline), "site %s: the EPP's view is stuck: %s", n, st)
				time.Sleep(20 * time.Millisecond)
			}
		}
	})

	t.Run("publishes_load and rounds, exactly, once converged", func(t *testing.T) {
		for _, n := range names {
			sites[n].awaitRounds(t, settled[n], 0)
		}
		for _, n := range names {
			s := sites[n]
			// The EPP's view holds its relay's round counts of the peers
			// (the relay tries every peer each round), at least the round
			// it converged by (2 or more past the start) once the EPP
			// polled after it.
			var st sitesState
			require.Eventually(t, func() bool {
				st = s.epp.sites(t)
				for _, m := range names {
					if ss, _ := st.site(m); m != n && (ss.Rounds == nil || float64(*ss.Rounds) < settled[n]) {
						return false
					}
				}
				return true
			}, 60*time.Second, 20*time.Millisecond, "site %s: peer rounds never reached %v: %+v", n, settled[n], st)
			require.ElementsMatch(t, names, st.loaded(), "site %s", n)
			for _, m := range names {
				ss, ok := st.site(m)
				require.True(t, ok, "site %s: no site %s", n, m)
				require.Equal(t, 2, ss.ProviderCount, "site %s sees site %s with pool and quiet only", n, m)
				if m == n {
					require.Nil(t, ss.Rounds, "site %s: its own site has no peer rounds", n)
				}
				pool, _ := ss.provider("pool")
				require.NotNil(t, pool.PublishesLoad)
				require.Equal(t, 1.0, *pool.PublishesLoad, "site %s: %s/pool has metricsConfig (or, a peer's, sent load): publishes load", n, m)
				quiet, _ := ss.provider("quiet")
				require.NotNil(t, quiet.PublishesLoad, "site %s: %s/quiet says it publishes no load", n, m)
				require.Equal(t, 0.0, *quiet.PublishesLoad, "site %s: %s/quiet has no metricsConfig", n, m)
				require.Nil(t, quiet.Generation, "site %s: %s/quiet: nothing scraped, no generation", n, m)
				require.Nil(t, quiet.Ready, "site %s: %s/quiet: nothing scraped", n, m)
			}
			// The view lists the topology's sites and no other; rows of
			// other sites (f's and g's, which relay a relays) are dropped
			// as site_mismatch, and only EPP a ever gets any.
			var listed []string
			for _, ss := range st.Sites {
				listed = append(listed, ss.Name)
			}
			want := slices.Clone(names)
			if n == "a" {
				want = append(want, "d")
			}
			require.ElementsMatch(t, want, listed, "site %s", n)
			mismatch := value(t, s.epp.eppMetrics(t), "grid_signals_ingest_dropped_total", "reason", "site_mismatch")
			if n == "a" {
				require.Positive(t, mismatch, "EPP a drops the rows of f and g")
			} else {
				require.Zero(t, mismatch, "site %s: a peer relay serves its own site's rows only", n)
			}
		}
		// Site d, a peer of relay a never heard from: EPP a knows its
		// rounds (relay a tried it) and nothing else, publishes_load
		// included.
		st := sites["a"].epp.sites(t)
		d, ok := st.site("d")
		require.True(t, ok, "d is in EPP a's topology")
		require.NotNil(t, d.Rounds, "relay a tried d in its rounds")
		require.GreaterOrEqual(t, float64(*d.Rounds), start["a"]+2)
		require.Zero(t, d.ProviderCount, "no provider of an unheard peer, so no publishes_load: %+v", d)
		require.Empty(t, d.Providers)
		m := sites["a"].relayMetrics(t)
		rounds := value(t, m, "grid_peer_poll_rounds_total")
		for _, o := range peerOutcomes {
			if o != "unreachable" {
				require.Zero(t, value(t, m, "grid_peer_poll_total", "peer", "d", "outcome", o), "peer d (a closed port) outcome %s", o)
			}
		}
		unreachable := value(t, m, "grid_peer_poll_total", "peer", "d", "outcome", "unreachable")
		require.InDelta(t, rounds, unreachable, 1, "every round tried d and failed to reach it (one round may be counted, its polls not yet)")
		// The genuine peers: every round polled each once, none was
		// refused (a poll may time out on a loaded machine: unreachable).
		for _, p := range []string{"b", "c"} {
			var sum float64
			for _, o := range peerOutcomes {
				v := value(t, m, "grid_peer_poll_total", "peer", p, "outcome", o)
				sum += v
				if o != "ok" && o != "unreachable" {
					require.Zero(t, v, "peer %s outcome %s", p, o)
				}
			}
			require.InDelta(t, rounds, sum, 1, "every round polled peer %s once", p)
			require.Positive(t, value(t, m, "grid_peer_poll_total", "peer", p, "outcome", "ok"), "peer %s", p)
		}
	})

	t.Run("a relay presenting the wrong identity is refused and its rows never appear", func(t *testing.T) {
		// An EPP of a fourth site, "spy", that expects its relay to be
		// site b's but is pointed at site a's relay: bad_identity on the
		// EPP side, and nothing else; and a peer of relay a claiming to be
		// site g with site x's certificate: bad_identity on the relay side.
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
		m := spy.awaitPolls(t, "bad_identity", 3)
		for _, r := range pollResults {
			if r != "bad_identity" {
				require.Zero(t, value(t, m, "grid_signals_poll_total", "result", r), "the spy's polls are all bad_identity, none %s", r)
			}
		}
		st := spy.sites(t)
		require.Equal(t, "bad_identity", st.Poller.LastResult)
		for _, ss := range st.Sites {
			require.Zero(t, ss.ProviderCount, "no row of the impostor is ingested: %+v", ss)
			require.Nil(t, ss.Rounds, "no row of the impostor is ingested: %+v", ss)
		}

		// Relay side: every round of relay a refused g as bad_identity,
		// and relay a relays no provider row of g (or x) to its EPP.
		gOutcomes := func(m map[string]float64) map[string]float64 {
			out := map[string]float64{}
			for _, o := range peerOutcomes {
				out[o] = value(t, m, "grid_peer_poll_total", "peer", "g", "outcome", o)
			}
			return out
		}
		bad0 := gOutcomes(s.relayMetrics(t))["bad_identity"]
		var rm map[string]float64
		require.Eventually(t, func() bool {
			rm = s.relayMetrics(t)
			return gOutcomes(rm)["bad_identity"] >= bad0+2
		}, 60*time.Second, 20*time.Millisecond, "relay a refused g twice more")
		outcomes := gOutcomes(rm)
		rounds := value(t, rm, "grid_peer_poll_rounds_total")
		var sum float64
		for _, v := range outcomes {
			sum += v
		}
		require.InDelta(t, rounds, sum, 1, "every round polled g once (one round may be counted, its polls not yet): %v", outcomes)
		require.Zero(t, outcomes["ok"], "g was never accepted: %v", outcomes)
		for _, o := range []string{"unauthorized", "bad_status", "too_large", "no_date"} {
			require.Zero(t, outcomes[o], "g's refusals are bad_identity (or, on a loaded machine, a timeout), never %s: %v", o, outcomes)
		}
		body := relayBody(t, s, caFile)
		for _, l := range strings.Split(body, "\n") {
			if strings.Contains(l, `grid_site="g"`) || strings.Contains(l, `grid_site="x"`) {
				require.NotContains(t, l, "grid_provider=", "the impostor's rows are never relayed")
			}
		}
		require.Contains(t, body, `grid_site="b",grid_cluster="b",grid_provider="pool"`)
	})

	t.Run("a peer whose body is over the limits is truncated and counted", func(t *testing.T) {
		s := sites["a"]
		// f's body is large: on a loaded machine a poll of it can time out
		// (its rows are then kept). Wait for one that succeeded, judged by
		// the relay's own count, then for two more rounds.
		okPolls := series("grid_peer_poll_total", "peer", "f", "outcome", "ok")
		require.Eventually(t, func() bool { return s.relayMetrics(t)[okPolls] >= 1 }, 60*time.Second, 20*time.Millisecond,
			"relay a never polled f successfully")
		from := s.rounds(t)
		s.awaitRounds(t, from, 2)
		body := relayBody(t, s, caFile)
		require.LessOrEqual(t, len(body), 768<<10, "the body to the EPP stays under 768 KiB")
		rows := map[string]int{}
		for _, l := range strings.Split(body, "\n") {
			if _, rest, ok := strings.Cut(l, `grid_site="f",grid_cluster="f",grid_provider="`); ok {
				p, _, _ := strings.Cut(rest, `"`)
				rows[p]++
			}
		}
		// Target big (4,200 load rows and the relay's publishes_load row)
		// is cut at 4,096 rows; the 40 other targets sorted after it are
		// kept in name order while they fit, the rest keep only their
		// publishes_load row (a cut never makes a provider unmeasured).
		require.Equal(t, 4096, rows["big"], "target big cut at 4096 rows")
		require.Len(t, rows, 41, "every target of f keeps its publishes_load row")
		kept := 0
		for i := range 40 {
			if rows[fmt.Sprintf("p%02d", i)] == 111 {
				kept++
			}
		}
		require.Greater(t, kept, 0, "some of f's small targets fit")
		require.Less(t, kept, 40, "some of f's targets were dropped")
		for i := range 40 {
			want, why := 1, "dropped: its publishes_load row only"
			if i < kept {
				want, why = 111, "110 rows and publishes_load, kept whole"
			}
			require.Equal(t, want, rows[fmt.Sprintf("p%02d", i)], "p%02d: %s", i, why)
		}
		for _, m := range names {
			require.Contains(t, body, fmt.Sprintf(`llm_d_epp_ready_endpoints{grid_site=%q,grid_cluster=%q,grid_provider="pool"} 2`, m, m), "site %s's rows are not pushed out", m)
		}
		// The counters: every body to the EPP cut 105 rows of big and
		// 40-kept targets.
		rm := s.relayMetrics(t)
		lines := value(t, rm, "grid_signals_relay_truncated_total", "store", "peer", "cut", "lines")
		targets := value(t, rm, "grid_signals_relay_truncated_total", "store", "peer", "cut", "target")
		require.Positive(t, lines)
		require.Zero(t, int(lines)%105, "lines cut %v: 105 per body", lines)
		require.GreaterOrEqual(t, targets, float64(40-kept), "targets cut")
		require.Zero(t, value(t, rm, "grid_signals_relay_truncated_total", "store", "local", "cut", "lines"), "this site's rows are never cut")
		require.Zero(t, value(t, rm, "grid_signals_relay_truncated_total", "store", "local", "cut", "target"))
		// The EPP ingested the cut body: the response size is the body's,
		// and its sites are all still there.
		m := s.epp.eppMetrics(t)
		require.LessOrEqual(t, value(t, m, "grid_signals_response_bytes"), float64(768<<10))
		require.Greater(t, value(t, m, "grid_signals_response_bytes"), float64(512<<10), "the fake peer's rows were relayed, cut")
		require.ElementsMatch(t, names, s.epp.sites(t).loaded())
	})

	t.Run("a relay that stops answering: unreachable, one log line each way", func(t *testing.T) {
		s := sites["b"]
		failed := func() int {
			return len(s.epp.epp.jsonLogs("Polling the site-relay failed; sites' load is not updated until it recovers"))
		}
		recovered := func() int { return len(s.epp.epp.jsonLogs("Polling the site-relay recovered")) }
		f0, r0 := failed(), recovered()
		m0 := s.epp.eppMetrics(t)
		count := func(m map[string]float64, r string) float64 {
			return value(t, m, "grid_signals_poll_total", "result", r)
		}
		require.NoError(t, s.relay.cmd.Process.Signal(syscall.SIGSTOP))
		stopped := true
		defer func() {
			if stopped {
				_ = s.relay.cmd.Process.Signal(syscall.SIGCONT)
			}
		}()
		// Three failed polls, counted.
		m1 := s.epp.awaitPolls(t, "unreachable", count(m0, "unreachable")+3)
		require.Equal(t, "unreachable", s.epp.sites(t).Poller.LastResult)
		require.Equal(t, f0+1, failed(), "one line when polling starts failing")
		for _, r := range pollResults {
			if r != "unreachable" && r != "ok" {
				require.Equal(t, count(m0, r), count(m1, r), "a stopped relay is unreachable, not %s", r)
			}
		}
		okStopped := count(m1, "ok")
		m2 := s.epp.awaitPolls(t, "unreachable", count(m1, "unreachable")+1)
		require.Equal(t, okStopped, count(m2, "ok"), "no ok poll while the relay is stopped")

		require.NoError(t, s.relay.cmd.Process.Signal(syscall.SIGCONT))
		stopped = false
		// Three ok polls after the recovery, counted.
		m3 := s.epp.awaitPolls(t, "ok", okStopped+3)
		require.Equal(t, "ok", s.epp.sites(t).Poller.LastResult)
		require.Equal(t, r0+1, recovered(), "one line when it recovers")
		require.Equal(t, f0+1, failed())
		for _, r := range pollResults {
			if r != "unreachable" && r != "ok" {
				require.Equal(t, count(m0, r), count(m3, r), "result %s", r)
			}
		}
		// The relay's rounds go on, and its EPP's store holds every site.
		s.awaitRounds(t, s.rounds(t), 2)
		require.Eventually(t, func() bool { return len(s.epp.sites(t).loaded()) == 3 }, 60*time.Second, 20*time.Millisecond)
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
