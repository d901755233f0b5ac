package relay

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

// peerRows are the rows a peer site serves for one provider at stamp.
func peerRows(site, provider string, stamp time.Time) []signals.Sample {
	var out []signals.Sample
	for i, name := range signals.PoolSeries {
		out = append(out, signals.Sample{Name: name, Site: site, Cluster: "cluster-" + site, Provider: provider, Value: float64(i), Stamp: stamp})
	}
	return append(out, signals.Sample{Name: signals.NamePublishesLoad, Site: site, Cluster: "cluster-" + site, Provider: provider, Value: 1, Stamp: stamp})
}

// signalsHandler serves body with a Date of date.
func signalsHandler(date time.Time, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", date.UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Type", signals.ContentType)
		_, _ = io.WriteString(w, body)
	}
}

// TestG02_WrongIdentityRefused: a peer presenting another identity than
// the one configured for it is refused and counted (bad_identity), and
// its rows never reach the EPP, whatever site its body names; a peer with
// the right identity has its rows keyed on that identity: rows naming
// another site are dropped as site_mismatch.
func TestG02_WrongIdentityRefused(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.7.1")
	clock := newFakeClock()
	cases := []struct {
		name string
		leaf *tlstest.Leaf
	}{
		{"another site's certificate", e.ca.SiteLeaf(t, "c")},
		{"the right SPIFFE ID from another CA", tlstest.NewCA(t, "rogue").SiteLeaf(t, "b")},
		{"a self-signed certificate", tlstest.SelfSigned(t, tlsutil.SiteSPIFFEID(tlstest.TrustDomain, "b"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := e.peerServer("127.0.7.2", tc.leaf, signalsHandler(clock.Now(), body(t, peerRows("b", "pool", clock.Now()))))
			cfg := e.config(a, "")
			cfg.Peers = []Peer{{Site: "b", Address: addr}}
			cfg.SetDefaults()
			r, reg := newRelay(t, cfg, clock)
			start(t, r, false)
			r.PollRound(context.Background())
			assert.Equal(t, 1.0, metricValue(t, reg, MetricPeerPolls, map[string]string{"peer": "b", "outcome": OutcomeBadIdentity}))
			assert.Equal(t, 0.0, metricValue(t, reg, MetricPeerPolls, map[string]string{"peer": "b", "outcome": OutcomeOK}))
			res, _ := e.fetch(r, a, a.epp)
			for _, s := range res.Samples {
				if s.Site == "b" {
					assert.False(t, signals.IsProviderSeries(s.Name), "a row of the refused peer reached the EPP: %+v", s)
				}
			}
			st := r.Status().Peers[0]
			assert.Equal(t, OutcomeBadIdentity, st.LastOutcome)
			assert.Contains(t, st.Message, "tlsutil: peer")
			assert.Equal(t, 0, st.Rows)
		})
	}

	t.Run("the verified identity decides, not the labels", func(t *testing.T) {
		b := e.site("b", "127.0.7.3")
		rows := append(peerRows("b", "pool", clock.Now()), peerRows("c", "pool", clock.Now())...)
		rows = append(rows, signals.Sample{Name: signals.NamePeerRounds, Site: "b", Value: 3, Stamp: clock.Now()})
		addr := e.peerServer(b.ip, b.leaf, signalsHandler(clock.Now(), body(t, rows)))
		cfg := e.config(a, "")
		cfg.Peers = []Peer{{Site: "b", Address: addr}}
		cfg.SetDefaults()
		r, reg := newRelay(t, cfg, clock)
		start(t, r, false)
		r.PollRound(context.Background())
		assert.Equal(t, 1.0, metricValue(t, reg, MetricPeerPolls, map[string]string{"peer": "b", "outcome": OutcomeOK}))
		assert.Equal(t, 6.0, metricValue(t, reg, MetricPeerDropped, map[string]string{"peer": "b", "reason": "site_mismatch"}))
		assert.Equal(t, 1.0, metricValue(t, reg, MetricPeerDropped, map[string]string{"peer": "b", "reason": "parse"}), "a peer serves no round rows")
		res, _ := e.fetch(r, a, a.epp)
		assert.Equal(t, []string{"a", "b"}, sitesOf(res))
		assert.Len(t, rowsOf(res, "b"), 6+2, "b's provider rows and round rows")
	})
}

// TestPeerRedirectNotFollowed: a peer answering 302 to another server
// (one that would even prove the peer's identity and serve valid rows) is
// polled as bad_status with the Location in the message; the poll never
// reaches the other server and no rows are accepted.
func TestPeerRedirectNotFollowed(t *testing.T) {
	e := newEnv(t)
	a, b := e.site("a", "127.0.8.5"), e.site("b", "127.0.8.6")
	clock := newFakeClock()
	var reached atomic.Int32
	serve := signalsHandler(clock.Now(), body(t, peerRows("b", "pool", clock.Now())))
	other := e.peerServer(b.ip, b.leaf, func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		serve(w, r)
	})
	addr := e.peerServer(b.ip, b.leaf, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://"+other+signals.Path, http.StatusFound)
	})
	cfg := e.config(a, "")
	cfg.Peers = []Peer{{Site: "b", Address: addr}}
	cfg.SetDefaults()
	r, reg := newRelay(t, cfg, clock)
	start(t, r, false)
	r.PollRound(context.Background())
	assert.Equal(t, 1.0, metricValue(t, reg, MetricPeerPolls, map[string]string{"peer": "b", "outcome": OutcomeBadStatus}))
	assert.Zero(t, reached.Load(), "the redirect was not followed")
	st := r.Status().Peers[0]
	assert.Equal(t, OutcomeBadStatus, st.LastOutcome)
	assert.Contains(t, st.Message, "302")
	assert.Contains(t, st.Message, other)
	assert.Zero(t, st.Rows)
}

// TestPeerRowsKeepTheirAge: a peer's rows are re-stamped on this relay's
// clock keeping their age at the peer (its Date minus their stamp), so a
// peer clock an hour off changes nothing (G-75: clock offsets between
// sites never enter).
func TestPeerRowsKeepTheirAge(t *testing.T) {
	e := newEnv(t)
	a, b := e.site("a", "127.0.8.1"), e.site("b", "127.0.8.2")
	clock := newFakeClock()
	peerNow := t0.Add(time.Hour) // the peer's clock
	rows := peerRows("b", "pool", peerNow.Add(-3*time.Second))
	rows = append(rows, signals.Sample{Name: signals.NameReadyEndpoints, Site: "b", Cluster: "cluster-b", Provider: "q", Value: 1, Stamp: peerNow.Add(400 * time.Millisecond)})
	addr := e.peerServer(b.ip, b.leaf, signalsHandler(peerNow, body(t, rows)))
	cfg := e.config(a, "")
	cfg.Peers = []Peer{{Site: "b", Address: addr}}
	cfg.SetDefaults()
	r, _ := newRelay(t, cfg, clock)
	start(t, r, false)
	r.PollRound(context.Background())
	res, _ := e.fetch(r, a, a.epp)
	got := rowsOf(res, "b")
	assert.True(t, got[signals.NameReadyEndpoints+"/pool"].Stamp.Equal(t0.Add(-3*time.Second)), "%v", got[signals.NameReadyEndpoints+"/pool"].Stamp)
	assert.True(t, got[signals.NameReadyEndpoints+"/q"].Stamp.Equal(t0), "a stamp past the peer's Date (second precision) is no newer than its receipt")
}

// TestG47_PublishesLoad: a provider publishes load unless (a) it is this
// site's provider with no metrics to scrape, or (b) it is a peer's
// provider this relay has received no load rows for since it started;
// after a restart during a partition the peer's providers do not publish
// load until it returns (G-49).
func TestG47_PublishesLoad(t *testing.T) {
	e := newEnv(t)
	a, b := e.site("a", "127.0.9.1"), e.site("b", "127.0.9.2")
	clock := newFakeClock()
	eppA := newStubEPP(t, a.ip, "pool")
	eppA.load(1, 0, 0, 0)

	// b: "pool" scraped (failing at first), "nometrics" without metrics.
	eppB := newStubEPP(t, b.ip, "pool")
	eppB.load(1, 0, 0, 0)
	eppB.mode.Store(1)
	cfgB := e.config(b, eppB.url, a)
	cfgB.Providers = append(cfgB.Providers, Provider{Name: "nometrics"})
	rb, _ := newRelay(t, cfgB, clock)
	start(t, rb, false)
	rb.ScrapeOnce(context.Background())

	cfgA := e.config(a, eppA.url, b)
	cfgA.Providers = append(cfgA.Providers, Provider{Name: "nometrics"})
	ra, _ := newRelay(t, cfgA, clock)
	start(t, ra, false)
	ra.ScrapeOnce(context.Background())
	publishes := func(r *Relay) map[string]float64 {
		res, _ := e.fetch(r, a, a.epp)
		out := map[string]float64{}
		for _, s := range res.Samples {
			if s.Name == signals.NamePublishesLoad {
				out[s.Site+"/"+s.Provider] = s.Value
			}
		}
		return out
	}
	ra.PollRound(context.Background())
	assert.Equal(t, map[string]float64{"a/pool": 1, "a/nometrics": 0, "b/pool": 0, "b/nometrics": 0}, publishes(ra),
		"(a) a/nometrics has no metrics; (b) no load rows of b/pool received yet")

	eppB.mode.Store(0)
	rb.ScrapeOnce(context.Background())
	clock.Add(2 * time.Second)
	ra.PollRound(context.Background())
	assert.Equal(t, map[string]float64{"a/pool": 1, "a/nometrics": 0, "b/pool": 1, "b/nometrics": 0}, publishes(ra))

	// b's scrape fails past staleMetricsSeconds: b serves no load rows,
	// but a has received some since it started: b/pool still publishes
	// load (and goes silent at the EPP).
	eppB.mode.Store(1)
	clock.Add(time.Minute)
	rb.ScrapeOnce(context.Background())
	ra.PollRound(context.Background())
	assert.Equal(t, 1.0, publishes(ra)["b/pool"])

	// A relay started now, while b serves no load rows: unmeasured.
	cfgA2 := e.config(a, eppA.url, b)
	cfgA2.ListenAddress = a.ip + ":0"
	ra2, _ := newRelay(t, cfgA2, clock)
	start(t, ra2, false)
	ra2.PollRound(context.Background())
	v, ok := publishes(ra2)["b/pool"]
	require.True(t, ok, "the restarted relay states b/pool's publishes_load")
	assert.Zero(t, v, "G-49: unmeasured after a restart until b returns")
}

// TestG71_RelayTruncation: the body to the local EPP stays under 768 KiB
// by dropping targets (peers' first, local ones last; each keeps its
// publishes_load row), each target
// is cut at 4096 lines, and both are counted in
// grid_signals_relay_truncated_total{store,cut}.
func TestG71_RelayTruncation(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.10.1")
	clock := newFakeClock()

	// 64 local providers on one EPP.
	var epp strings.Builder
	for i := range MaxProviders {
		for _, name := range signals.PoolSeries {
			fmt.Fprintf(&epp, "%s{name=\"p%02d\",inference_pool=\"p%02d\"} 1\n", name, i, i)
		}
	}
	url := textEPP(t, a.ip, func() string { return epp.String() })

	t.Run("lines", func(t *testing.T) {
		b := e.site("b", "127.0.10.2")
		var rows []signals.Sample
		for i := range 5000 {
			rows = append(rows, signals.Sample{Name: signals.NameAverageQueue, Site: "b", Cluster: "cluster-b", Provider: "big", Value: float64(i), Stamp: clock.Now()})
		}
		addr := e.peerServer(b.ip, b.leaf, signalsHandler(clock.Now(), body(t, rows)))
		cfg := e.config(a, url)
		cfg.Peers = []Peer{{Site: "b", Address: addr}}
		cfg.SetDefaults()
		r, reg := newRelay(t, cfg, clock)
		start(t, r, false)
		r.PollRound(context.Background())
		res, _ := e.fetch(r, a, a.epp)
		n := 0
		for _, s := range res.Samples {
			if s.Provider == "big" && s.Name == signals.NameAverageQueue {
				n++
			}
		}
		// The target holds 5000 queue rows and this relay's publishes_load
		// row, which sorts first: 4096 rows are kept.
		assert.Equal(t, signals.DefaultMaxLinesPerTarget-1, n)
		assert.Equal(t, 1.0, rowsOf(res, "b")[signals.NamePublishesLoad+"/big"].Value)
		assert.Equal(t, 905.0, metricValue(t, reg, MetricTruncated, map[string]string{"store": "peer", "cut": "lines"}))
	})

	t.Run("bytes", func(t *testing.T) {
		b := e.site("b2", "127.0.10.3")
		var rows []signals.Sample
		for p := range 64 {
			for i := range 120 {
				rows = append(rows, signals.Sample{Name: signals.NameAverageRunning, Site: "b2", Cluster: "cluster-b2", Provider: fmt.Sprintf("provider-%02d", p), Value: float64(i), Stamp: clock.Now()})
			}
		}
		peerBody := body(t, rows)
		require.Less(t, len(peerBody), signals.DefaultMaxBytes)
		require.Greater(t, len(peerBody), signals.RelayMaxBytes-40<<10)
		addr := e.peerServer(b.ip, b.leaf, signalsHandler(clock.Now(), peerBody))
		cfg := e.config(a, url)
		cfg.Providers = nil
		for i := range MaxProviders {
			cfg.Providers = append(cfg.Providers, Provider{Name: fmt.Sprintf("p%02d", i), MetricsConfig: &MetricsConfig{Endpoint: url}})
		}
		cfg.Peers = []Peer{{Site: "b2", Address: addr}}
		cfg.SetDefaults()
		r, reg := newRelay(t, cfg, clock)
		start(t, r, false)
		r.ScrapeOnce(context.Background())
		r.PollRound(context.Background())

		c, closeIdle := e.client(a.epp, a.leaf.Identity())
		defer closeIdle()
		resp, err := c.Get("https://" + r.SignalsAddr() + signals.Path)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.LessOrEqual(t, len(raw), signals.RelayMaxBytes)
		res, err := signals.Parse(strings.NewReader(string(raw)), signals.ParseOptions{Date: clock.Now()})
		require.NoError(t, err)
		assert.Len(t, rowsOf(res, "a"), 64*7, "every local target is kept")
		dropped := metricValue(t, reg, MetricTruncated, map[string]string{"store": "peer", "cut": "target"})
		assert.Greater(t, dropped, 0.0)
		kept, publishes := map[string]bool{}, map[string]bool{}
		for _, s := range res.Samples {
			switch {
			case s.Site != "b2" || s.Provider == "":
			case s.Name == signals.NamePublishesLoad:
				publishes[s.Provider] = true
			default:
				kept[s.Provider] = true
			}
		}
		// Every peer target is either kept whole or dropped and counted;
		// they fill the body in order. A dropped target keeps its
		// publishes_load row: the EPP does not take it for unmeasured.
		assert.Equal(t, 64.0, float64(len(kept))+dropped)
		assert.Len(t, publishes, 64, "every peer target's publishes_load row")
		assert.Equal(t, 0.0, metricValue(t, reg, MetricTruncated, map[string]string{"store": "local", "cut": "target"}))
		assert.Equal(t, float64(len(raw)), metricValue(t, reg, MetricResponseBytes, map[string]string{"client": ClientLocalEPP}))
	})
}

// TestG72_PeerPollOutcomes: the relay counts every poll of every peer in
// grid_peer_poll_total{peer,outcome} with its outcome, and every round
// advances each peer's round count and end stamp, failed or not (G-41).
func TestG72_PeerPollOutcomes(t *testing.T) {
	e := newEnv(t)
	a := e.site("a", "127.0.11.1")
	clock := newFakeClock()
	ok := body(t, peerRows("p-ok", "pool", clock.Now()))
	leaf := func(site string) *tlstest.Leaf { return e.ca.SiteLeaf(t, site) }
	serve := func(ip, site string, h http.HandlerFunc) string { return e.peerServer(ip, leaf(site), h) }
	peers := map[string]string{
		OutcomeOK:          serve("127.0.11.2", "p-ok", signalsHandler(clock.Now(), ok)),
		OutcomeUnreachable: "127.0.11.3:" + reservePort(t, "127.0.11.3"),
		OutcomeBadIdentity: serve("127.0.11.4", "someone-else", signalsHandler(clock.Now(), "")),
		OutcomeUnauthorized: serve("127.0.11.5", "p-unauthorized", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", http.StatusForbidden)
		}),
		OutcomeBadStatus: serve("127.0.11.6", "p-bad-status", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}),
		OutcomeTooLarge: serve("127.0.11.7", "p-too-large", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("#", signals.DefaultMaxBytes+1))
		}),
		OutcomeNoDate: serve("127.0.11.8", "p-no-date", func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Date"] = nil
			_, _ = io.WriteString(w, ok)
		}),
	}
	sites := map[string]string{OutcomeOK: "p-ok", OutcomeUnreachable: "p-unreachable", OutcomeBadIdentity: "p-bad-identity", OutcomeUnauthorized: "p-unauthorized",
		OutcomeBadStatus: "p-bad-status", OutcomeTooLarge: "p-too-large", OutcomeNoDate: "p-no-date"}
	// A peer that refuses our certificate in the TLS 1.2 handshake.
	peers["unauthorized-tls"] = e.tls12Refuser("127.0.11.9", leaf("p-refuses-tls"))
	sites["unauthorized-tls"] = "p-refuses-tls"

	cfg := e.config(a, "")
	for outcome, addr := range peers {
		cfg.Peers = append(cfg.Peers, Peer{Site: sites[outcome], Address: addr})
	}
	cfg.ConnectTimeout, cfg.RequestTimeout, cfg.PeerPollInterval = time.Second, time.Second, time.Second
	cfg.SetDefaults()
	r, reg := newRelay(t, cfg, clock)
	start(t, r, false)
	clock.Add(time.Second)
	r.PollRound(context.Background())
	clock.Add(2 * time.Second)
	r.PollRound(context.Background())

	for outcome, site := range sites {
		want := outcome
		if outcome == "unauthorized-tls" {
			want = OutcomeUnauthorized
		}
		for _, o := range Outcomes {
			n := 0.0
			if o == want {
				n = 2
			}
			assert.Equal(t, n, metricValue(t, reg, MetricPeerPolls, map[string]string{"peer": site, "outcome": o}), "%s: outcome %s", site, o)
		}
	}
	res, _ := e.fetch(r, a, a.epp)
	for _, site := range sites {
		rows := rowsOf(res, site)
		assert.Equal(t, 2.0, rows[signals.NamePeerRounds+"/"].Value, site)
		assert.True(t, rows[signals.NamePeerRoundEnd+"/"].Stamp.Equal(t0.Add(3*time.Second)), site)
	}
	assert.Equal(t, float64(t0.Add(3*time.Second).Unix()), metricValue(t, reg, MetricPeerLastSuccess, map[string]string{"peer": "p-ok"}))
	assert.Equal(t, 2.0, metricValue(t, reg, MetricPeerRounds, nil))
}

// tls12Refuser serves TLS 1.2 at most and refuses every client
// certificate in the handshake, so the client sees the alert.
func (e *testEnv) tls12Refuser(ip string, leaf *tlstest.Leaf) string {
	e.t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	require.NoError(e.t, err)
	cfg := tlsutil.MutualServerConfig(tlsutil.Static(leaf.TLS), tlsutil.VerifyPeer([]tlsutil.Identity{{SPIFFEID: "spiffe://nobody/x"}}, nil, 0))
	cfg.MaxVersion = tls.VersionTLS12
	srv := &http.Server{Handler: http.NotFoundHandler(), TLSConfig: cfg, ReadHeaderTimeout: time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(l, "", "") })
	e.t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
	return l.Addr().String()
}

// scriptedPeer serves, on every poll, the body and clock the test set
// last: the peer's clock reading now (Date truncates it to the second;
// X-Grid-Now-Ms carries it exactly when withNow).
type scriptedPeer struct {
	mu      sync.Mutex
	now     time.Time
	rows    []signals.Sample
	withNow bool
}

func (p *scriptedPeer) set(now time.Time, rows ...signals.Sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now, p.rows = now, rows
}

func (p *scriptedPeer) handler(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		now, rows, withNow := p.now, p.rows, p.withNow
		p.mu.Unlock()
		if withNow {
			signals.SetClock(w.Header(), now)
		} else {
			w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
		}
		_, _ = io.WriteString(w, body(t, rows))
	}
}

// TestPeerRestampIsStable: a peer row re-stamped on this relay's clock
// keeps its re-stamp while the peer's stamp is unchanged, whatever the
// peer's Date says at each poll (its one-second precision used to give an
// unchanged row a new stamp on every poll: a new sample for the EPP); a
// newer peer row gets a newer stamp, never an older or equal one; with
// X-Grid-Now-Ms the age is exact to the millisecond.
func TestPeerRestampIsStable(t *testing.T) {
	e := newEnv(t)
	a, b := e.site("a", "127.0.14.1"), e.site("b", "127.0.14.2")
	ready := func(stamp time.Time, v float64) signals.Sample {
		return signals.Sample{Name: signals.NameReadyEndpoints, Site: "b", Cluster: "cluster-b", Provider: "pool", Value: v, Stamp: stamp}
	}
	peerT := t0.Add(time.Hour) // the peer's clock is an hour off ours

	for _, withNow := range []bool{false, true} {
		t.Run(fmt.Sprintf("X-Grid-Now-Ms=%v", withNow), func(t *testing.T) {
			peer := &scriptedPeer{withNow: withNow}
			addr := e.peerServer(b.ip, b.leaf, peer.handler(t))
			clock := newFakeClock()
			cfg := e.config(a, "")
			cfg.ListenAddress = a.ip + ":0"
			cfg.Peers = []Peer{{Site: "b", Address: addr}}
			cfg.SetDefaults()
			r, _ := newRelay(t, cfg, clock)
			start(t, r, false)
			stamp := func() time.Time {
				t.Helper()
				res, _ := e.fetch(r, a, a.epp)
				s, ok := rowsOf(res, "b")[signals.NameReadyEndpoints+"/pool"]
				require.True(t, ok)
				return s.Stamp
			}

			// A row read 500 ms before the peer's clock says 1.3 s.
			row := ready(peerT.Add(500*time.Millisecond), 2)
			peer.set(peerT.Add(1300*time.Millisecond), row)
			r.PollRound(context.Background())
			first := stamp()
			if withNow {
				assert.True(t, first.Equal(t0.Add(-800*time.Millisecond)), "exact age: %v", first)
			}
			// The same row under later Dates, the peer's clock and ours
			// advancing differently between polls.
			for i, step := range []struct{ peer, ours time.Duration }{{1700 * time.Millisecond, 2 * time.Second}, {300 * time.Millisecond, 2 * time.Second}, {2900 * time.Millisecond, 1500 * time.Millisecond}} {
				peerNow := peerT.Add(1300 * time.Millisecond).Add(step.peer * time.Duration(i+1))
				peer.set(peerNow, row)
				clock.Add(step.ours)
				r.PollRound(context.Background())
				assert.True(t, stamp().Equal(first), "poll %d: an unchanged row keeps its stamp: %v, first %v", i+2, stamp(), first)
			}

			// A newer row whose age the Date alone would put before the
			// last re-stamp: still newer.
			prev := stamp()
			now := clock.Now()
			peerNow := peerT.Add(20*time.Second + 999*time.Millisecond)
			peer.set(peerNow, ready(peerNow.Add(-950*time.Millisecond), 3))
			clock.Add(100 * time.Millisecond)
			r.PollRound(context.Background())
			got := stamp()
			assert.True(t, got.After(prev), "a newer row gets a newer stamp: %v, before %v", got, prev)
			assert.False(t, got.After(now.Add(100*time.Millisecond)), "never after its receipt")
			if withNow {
				assert.True(t, got.Equal(now.Add(100*time.Millisecond-950*time.Millisecond)), "exact age: %v", got)
			}
			// And it too stays put.
			peer.set(peerNow.Add(3*time.Second), ready(peerNow.Add(-950*time.Millisecond), 3))
			clock.Add(2 * time.Second)
			r.PollRound(context.Background())
			assert.True(t, stamp().Equal(got))
		})
	}
}

// TestPeerRestampSurvivesAbsence: a series a poll's body leaves out and a
// later one brings back with the same peer stamp keeps the re-stamp it
// had (it is the same sample, not a new one read later); the re-stamps
// of providers the peer stopped serving are forgotten with them, so they
// stay bounded by the providers cap.
func TestPeerRestampSurvivesAbsence(t *testing.T) {
	e := newEnv(t)
	a, b := e.site("a", "127.0.14.5"), e.site("b", "127.0.14.6")
	row := func(name, provider string, stamp time.Time) signals.Sample {
		return signals.Sample{Name: name, Site: "b", Cluster: "cluster-b", Provider: provider, Value: 1, Stamp: stamp}
	}
	peer := &scriptedPeer{withNow: true}
	addr := e.peerServer(b.ip, b.leaf, peer.handler(t))
	clock := newFakeClock()
	cfg := e.config(a, "")
	cfg.ListenAddress = a.ip + ":0"
	cfg.Peers = []Peer{{Site: "b", Address: addr}}
	cfg.SetDefaults()
	r, _ := newRelay(t, cfg, clock)
	start(t, r, false)
	stamps := func() map[string]signals.Sample {
		t.Helper()
		res, _ := e.fetch(r, a, a.epp)
		return rowsOf(res, "b")
	}
	peerT := t0.Add(time.Hour)
	ready := row(signals.NameReadyEndpoints, "pool", peerT)
	running := row(signals.NameAverageRunning, "pool", peerT)

	peer.set(peerT.Add(time.Second), ready, running)
	r.PollRound(context.Background())
	first := stamps()[signals.NameReadyEndpoints+"/pool"].Stamp
	require.False(t, first.IsZero())

	// The next body leaves the ready row out.
	clock.Add(2 * time.Second)
	peer.set(peerT.Add(3*time.Second), running)
	r.PollRound(context.Background())
	assert.NotContains(t, stamps(), signals.NameReadyEndpoints+"/pool")

	// It comes back unchanged: same sample, same stamp, though the
	// response's latency differs (the peer's clock reads 300 ms more than
	// ours advanced, which would re-stamp it 300 ms earlier).
	clock.Add(2 * time.Second)
	peer.set(peerT.Add(5300*time.Millisecond), ready, running)
	r.PollRound(context.Background())
	got := stamps()[signals.NameReadyEndpoints+"/pool"].Stamp
	assert.True(t, got.Equal(first), "a returning series keeps its re-stamp: %v, first %v", got, first)

	// A peer renaming all its providers: the old ones' re-stamps go.
	var rows []signals.Sample
	for i := range signals.DefaultMaxProvidersPerSite {
		rows = append(rows, row(signals.NameReadyEndpoints, fmt.Sprintf("n%02d", i), peerT.Add(6*time.Second)))
	}
	clock.Add(2 * time.Second)
	peer.set(peerT.Add(7*time.Second), rows...)
	r.PollRound(context.Background())
	r.mu.Lock()
	p := r.peers[0]
	assert.Len(t, p.known, signals.DefaultMaxProvidersPerSite)
	assert.Len(t, p.stamps, signals.DefaultMaxProvidersPerSite)
	for k := range p.stamps {
		assert.NotNil(t, p.known[k.provider], "%v", k)
	}
	r.mu.Unlock()
}

// TestPeerRenameAtCapKeepsOthers: a peer at the providers cap renaming one
// provider to a name that sorts first (bodies are sorted by provider)
// forgets that one provider only: the unchanged providers keep their
// known state and their re-stamps (forgetting them would re-stamp their
// unchanged rows: a new sample for the EPP, or an older one).
func TestPeerRenameAtCapKeepsOthers(t *testing.T) {
	peerT := t0.Add(time.Hour) // the peer's clock is an hour off ours
	body := func(names []string) []signals.Sample {
		var out []signals.Sample
		for _, n := range names {
			out = append(out,
				signals.Sample{Name: signals.NameAverageRunning, Site: "b", Cluster: "cluster-b", Provider: n, Value: 1, Stamp: peerT},
				signals.Sample{Name: signals.NameReadyEndpoints, Site: "b", Cluster: "cluster-b", Provider: n, Value: 2, Stamp: peerT})
		}
		return out
	}
	var names []string
	for i := range signals.DefaultMaxProvidersPerSite {
		names = append(names, fmt.Sprintf("p%02d", i))
	}
	p := &peerState{cfg: Peer{Site: "b"}, known: map[string]*peerProvider{}, stamps: map[seriesKey]restamp{}}
	drops := 0
	drop := func(signals.DropReason) { drops++ }
	p.accept(pollResult{res: signals.Result{Samples: body(names)}, now: peerT.Add(time.Second), recv: t0}, drop)
	require.Len(t, p.known, signals.DefaultMaxProvidersPerSite)
	before := maps.Clone(p.stamps)
	known := maps.Clone(p.known)

	// p01 becomes a00; the same rows otherwise, received with another
	// latency (a fresh re-stamp would differ by 300 ms).
	renamed := append([]string{"a00", "p00"}, names[2:]...)
	p.accept(pollResult{res: signals.Result{Samples: body(renamed)}, now: peerT.Add(3300 * time.Millisecond), recv: t0.Add(2 * time.Second)}, drop)
	assert.Zero(t, drops)
	assert.Len(t, p.known, signals.DefaultMaxProvidersPerSite)
	assert.NotContains(t, p.known, "p01")
	assert.Contains(t, p.known, "a00")
	for _, n := range renamed[1:] {
		assert.Same(t, known[n], p.known[n], "%s keeps its known state", n)
		for _, series := range []string{signals.NameAverageRunning, signals.NameReadyEndpoints} {
			k := seriesKey{n, series}
			assert.Equal(t, before[k], p.stamps[k], "%v keeps its re-stamp", k)
		}
	}
	for _, s := range p.samples {
		if s.Provider != "a00" {
			assert.True(t, s.Stamp.Equal(before[seriesKey{s.Provider, s.Name}].local), "%s/%s", s.Provider, s.Name)
		}
	}
	assert.NotContains(t, p.stamps, seriesKey{"p01", signals.NameReadyEndpoints})
	assert.Len(t, p.stamps, 2*signals.DefaultMaxProvidersPerSite)
}
