package poller

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// goodBody is a relay's body: the local site's provider, and two peers'
// rows with their poll rounds.
func goodBody() string {
	d := relayDate
	return batch("site-a", "cluster-a", "pool", d.Add(-200*time.Millisecond), 4) +
		peerRounds("site-b", d.Add(-100*time.Millisecond), 7, d.Add(-100*time.Millisecond)) +
		batch("site-b", "site-b", "pool", d.Add(-time.Second), 2) +
		peerRounds("site-c", d.Add(-300*time.Millisecond), 9, d.Add(-300*time.Millisecond)) +
		batch("site-c", "site-c", "pool", d.Add(-2*time.Second), 1)
}

// TestG04_PollsOnlyTheLocalRelay: the EPP polls its local relay and no
// other (the URL is one relay's; a redirect, which could point at a peer,
// is not followed) and still learns every site's load, relayed by it; it
// keeps no count of its own requests (the store holds only relayed rows).
func TestG04_PollsOnlyTheLocalRelay(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	peer := startRelay(t, p, p.peerB, nil) // site-b's relay, reachable on loopback
	peer.serve(goodBody(), relayDate)
	rl.serve(goodBody(), relayDate)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))

	for range 3 {
		require.Equal(t, ResultOK, r.poll(t))
	}
	assert.Equal(t, int64(3), rl.requests.Load())
	assert.Zero(t, peer.requests.Load(), "a peer relay is never polled")
	sn := r.store.Snapshot()
	for _, site := range []string{"site-a", "site-b", "site-c"} {
		s, ok := sn.Site(site)
		require.True(t, ok, site)
		require.Len(t, s.Providers, 1, site)
		assert.True(t, s.Providers[0].Running.Known(), site)
	}
	b, _ := sn.Site("site-b")
	assert.Equal(t, uint64(7), b.Rounds)

	// The local relay redirects to the peer: not followed.
	rl.set(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, peer.url(), http.StatusTemporaryRedirect)
	})
	assert.Equal(t, ResultUnreachable, r.poll(t))
	assert.Zero(t, peer.requests.Load(), "a redirect to a peer is not followed")
	assert.Contains(t, r.p.Status().LastError, "307")

	// Only one relay, over TLS.
	for _, bad := range []string{"http://127.0.0.1:1/v1/site/signals", "", "https:///v1", "https://u:p@relay/", "https://relay/?x=1"} {
		_, err := ValidateURL(bad)
		assert.Error(t, err, bad)
	}
	u, err := ValidateURL("https://relay.site-a:9443")
	require.NoError(t, err)
	assert.Equal(t, "https://relay.site-a:9443/v1/site/signals", u.String())
}

// TestG70_ReadsAtMost1MiB: a body of 1 MiB is read; one byte more gives
// too_large, whether the size is announced or not, without reading the
// rest (an endless body ends the poll), and nothing of it is ingested.
func TestG70_ReadsAtMost1MiB(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))

	pad := func(n int) string { // rows, then comment padding to n bytes
		b := batch("site-a", "cluster-a", "pool", relayDate, 1)
		return b + "#" + strings.Repeat("x", n-len(b)-2) + "\n"
	}
	exact := pad(MaxBytes)
	require.Len(t, exact, MaxBytes)
	rl.serve(exact, relayDate)
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, float64(MaxBytes), r.metric(t, "grid_signals_response_bytes"))

	v := r.store.Snapshot().Version
	for name, respond := range map[string]func(w http.ResponseWriter, _ *http.Request){
		"announced": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(MaxBytes+1))
			_, _ = io.WriteString(w, pad(MaxBytes+1))
		},
		"chunked": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, pad(MaxBytes+1))
			w.(http.Flusher).Flush()
		},
		"endless": func(w http.ResponseWriter, r *http.Request) {
			chunk := []byte("# " + strings.Repeat("y", 4093) + "\n")
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			rl.set(respond)
			before := r.polls(t, ResultTooLarge)
			start := time.Now()
			assert.Equal(t, ResultTooLarge, r.poll(t))
			assert.Less(t, time.Since(start), 900*time.Millisecond, "refused before the timeout")
			assert.Equal(t, before+1, r.polls(t, ResultTooLarge))
			assert.Equal(t, v, r.store.Snapshot().Version, "nothing ingested")
			assert.Equal(t, float64(MaxBytes), r.metric(t, "grid_signals_response_bytes"), "the last successful response's size")
		})
	}
}

// TestG72_PollResults: every result of grid_signals_poll_total, each from
// a real TLS exchange on loopback.
func TestG72_PollResults(t *testing.T) {
	p := newPKI(t)
	good := startRelay(t, p, p.relay, nil)
	good.serve(goodBody(), relayDate)
	refusing := startRelay(t, p, p.relay, tlsutil.VerifyPeer([]tlsutil.Identity{p.peerB.Identity()}, p.ca.Pool, 0)) // accepts site-b only, in the handshake
	otherSite := startRelay(t, p, p.peerB, nil)
	selfSigned := startRelay(t, p, p.selfRelay, nil)
	otherCA := startRelay(t, p, p.otherCARelay, nil)
	for _, rl := range []*relay{otherSite, selfSigned, otherCA} {
		rl.serve(goodBody(), relayDate)
	}
	closed := func() string { // a port nothing listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		return "https://" + addr + signals.Path
	}()
	// hangs is a relay that never answers: it holds the request until the
	// client gives up, then aborts it, so that no response (not even the
	// empty 200 a returning handler gets) can ever reach the poller.
	hangs := func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		panic(http.ErrAbortHandler)
	}
	status := func(code int) func(w http.ResponseWriter, _ *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, http.StatusText(code), code) }
	}
	withDate := func(date string) func(w http.ResponseWriter, _ *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Date", date)
			_, _ = io.WriteString(w, goodBody())
		}
	}
	plainHTTP := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, goodBody()) }), ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return "https://" + ln.Addr().String() + signals.Path
	}()

	pinned := func(pin string) func(*Options) {
		return func(o *Options) {
			o.TLS = tlsutil.ClientConfig("", func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &p.epp.TLS, nil },
				tlsutil.VerifyPeer([]tlsutil.Identity{{SHA256: pin}}, nil, 0))
		}
	}
	noClientCert := func(o *Options) {
		o.TLS = tlsutil.ClientConfig("", nil, tlsutil.VerifyPeer([]tlsutil.Identity{p.relay.Identity()}, p.ca.Pool, 0))
	}

	tests := []struct {
		name    string
		url     string
		respond func(w http.ResponseWriter, r *http.Request)
		mutate  []func(*Options)
		want    Result
		errHas  string
	}{
		{name: "ok", url: good.url(), want: ResultOK},
		{name: "ok with a pin", url: good.url(), mutate: []func(*Options){pinned(p.relay.SHA256)}, want: ResultOK},
		{name: "unreachable: connection refused", url: closed, want: ResultUnreachable, errHas: "connection refused"},
		{name: "unreachable: timeout", url: good.url(), respond: hangs,
			mutate: []func(*Options){func(o *Options) { o.Timeout = 200 * time.Millisecond }}, want: ResultUnreachable, errHas: "deadline exceeded|timeout awaiting response headers"},
		{name: "unreachable: 500", url: good.url(), respond: status(500), want: ResultUnreachable, errHas: "500"},
		{name: "unreachable: 404", url: good.url(), respond: status(404), want: ResultUnreachable, errHas: "404"},
		{name: "unreachable: not TLS", url: plainHTTP, want: ResultUnreachable},
		{name: "unauthorized: 403", url: good.url(), respond: status(403), want: ResultUnauthorized, errHas: "403"},
		{name: "unauthorized: 401", url: good.url(), respond: status(401), want: ResultUnauthorized, errHas: "401"},
		{name: "unauthorized: the relay rejects our certificate in the handshake", url: refusing.url(), want: ResultUnauthorized, errHas: "remote error"},
		{name: "unauthorized: no client certificate", url: good.url(), mutate: []func(*Options){noClientCert}, want: ResultUnauthorized},
		{name: "too_large", url: good.url(), respond: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("#\n", MaxBytes/2+1))
		}, want: ResultTooLarge},
		{name: "no_date: missing", url: good.url(), respond: func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Date"] = nil
			_, _ = io.WriteString(w, goodBody())
		}, want: ResultNoDate, errHas: "no Date header"},
		{name: "no_date: unparsable", url: good.url(), respond: withDate("yesterday"), want: ResultNoDate, errHas: `"yesterday"`},
		{name: "bad_identity: another site's relay", url: otherSite.url(), want: ResultBadIdentity, errHas: "site/site-b"},
		{name: "bad_identity: self-signed with the relay's SPIFFE ID", url: selfSigned.url(), want: ResultBadIdentity, errHas: "not signed by the CA bundle"},
		{name: "bad_identity: another CA", url: otherCA.url(), want: ResultBadIdentity, errHas: "not signed by the CA bundle"},
		{name: "bad_identity: wrong pin", url: good.url(), mutate: []func(*Options){pinned(p.peerB.SHA256)}, want: ResultBadIdentity, errHas: "not the expected"},
	}
	seen := map[Result]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.respond != nil {
				good.set(tt.respond)
				defer good.serve(goodBody(), relayDate)
			}
			r := newRig(t, tt.url, p.clientTLS(p.relay.Identity()), tt.mutate...)
			v := r.store.Snapshot().Version
			got := r.poll(t)
			assert.Equal(t, tt.want, got, "error: %s", r.p.Status().LastError)
			// errHas lists what the error may say, split by "|" (a
			// timeout reads differently as the deadline or the response
			// header timeout comes first).
			if msg := r.p.Status().LastError; !slices.ContainsFunc(strings.Split(tt.errHas, "|"), func(want string) bool { return strings.Contains(msg, want) }) {
				t.Errorf("error %q says none of %q", msg, tt.errHas)
			}
			for _, res := range Results {
				want := 0.0
				if res == tt.want {
					want = 1
				}
				assert.Equal(t, want, r.polls(t, res), "grid_signals_poll_total{result=%q}", res)
			}
			if tt.want != ResultOK {
				assert.Equal(t, v, r.store.Snapshot().Version, "a failed poll ingests nothing")
			}
			seen[got] = true
		})
	}
	for _, res := range Results {
		assert.True(t, seen[res], "result %q not exercised", res)
	}
}

// TestG73_LastSuccessAndResponseBytes: the timestamp is the (EPP's) time
// of the last ok poll and the size that of its body; failures change
// neither.
func TestG73_LastSuccessAndResponseBytes(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))
	assert.Zero(t, r.metric(t, "grid_signals_last_success_timestamp_seconds"))
	assert.Zero(t, r.metric(t, "grid_signals_response_bytes"))

	body := goodBody()
	rl.serve(body, relayDate)
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, float64(eppNow.Unix()), r.metric(t, "grid_signals_last_success_timestamp_seconds"))
	assert.Equal(t, float64(len(body)), r.metric(t, "grid_signals_response_bytes"))
	assert.Equal(t, eppNow, r.store.Snapshot().ReadAt, "the local site's judgement clock")
	assert.True(t, relayDate.Equal(r.store.Snapshot().Date))

	r.clock.Step(1500 * time.Millisecond)
	rl.set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", 503) })
	require.Equal(t, ResultUnreachable, r.poll(t))
	assert.Equal(t, float64(eppNow.Unix()), r.metric(t, "grid_signals_last_success_timestamp_seconds"), "a failure keeps the last success")
	assert.Equal(t, float64(len(body)), r.metric(t, "grid_signals_response_bytes"))

	small := batch("site-a", "cluster-a", "pool", relayDate.Add(time.Second), 1)
	rl.serve(small, relayDate.Add(time.Second))
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, float64(eppNow.Add(1500*time.Millisecond).UnixMilli())/1000, r.metric(t, "grid_signals_last_success_timestamp_seconds"))
	assert.Equal(t, float64(len(small)), r.metric(t, "grid_signals_response_bytes"))
	st := r.p.Status()
	assert.Equal(t, eppNow.Add(1500*time.Millisecond), st.LastSuccess)
	assert.Equal(t, len(small), st.LastBytes)
	assert.Equal(t, 7, st.LastRows)
}

// TestG74_IngestDropped: every refused row is counted by its reason, the
// accepted rows are ingested, and the poll is still ok.
func TestG74_IngestDropped(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))
	for _, reason := range signals.DropReasons {
		assert.Zero(t, r.dropped(t, reason), "series initialised: %s", reason)
	}

	var b strings.Builder
	b.WriteString(batch("site-a", "cluster-a", "pool", relayDate, 3)) // kept: 7 rows
	// parse: 3
	b.WriteString("llm_d_epp_unknown_series{grid_site=\"site-a\"} 1 1\n")
	b.WriteString(row(signals.NameAverageRunning, "site-a", "cluster-a", "Bad_Name", 1, relayDate))
	b.WriteString("llm_d_epp_average_queue_size{grid_site=\"site-a\",grid_cluster=\"cluster-a\",grid_provider=\"pool\"} -1 1\n")
	// skew: 2
	b.WriteString(row(signals.NameAverageQueue, "site-b", "site-b", "pool", 1, relayDate.Add(2*time.Second)))
	b.WriteString(row(signals.NameAverageQueue, "site-b", "site-b", "pool", 1, relayDate.Add(-25*time.Hour)))
	// site_mismatch: 2 (a site the topology does not know; a wrong cluster)
	b.WriteString(row(signals.NameAverageQueue, "site-z", "site-z", "pool", 1, relayDate))
	b.WriteString(row(signals.NameAverageQueue, "site-b", "cluster-x", "pool", 1, relayDate))
	// cap: 65 providers at site-c, one row each: one beyond the cap
	for i := range signals.DefaultMaxProvidersPerSite + 1 {
		b.WriteString(row(signals.NameAverageRunning, "site-c", "site-c", fmt.Sprintf("pool-%02d", i), 1, relayDate))
	}
	rl.serve(b.String(), relayDate)
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, 3.0, r.dropped(t, signals.DropParse))
	assert.Equal(t, 2.0, r.dropped(t, signals.DropSkew))
	assert.Equal(t, 2.0, r.dropped(t, signals.DropSiteMismatch))
	assert.Equal(t, 1.0, r.dropped(t, signals.DropCap))
	assert.Equal(t, map[string]int{"parse": 3, "skew": 2, "site_mismatch": 2, "cap": 1}, r.p.Status().LastDropped)
	sn := r.store.Snapshot()
	c, _ := sn.Site("site-c")
	assert.Len(t, c.Providers, signals.DefaultMaxProvidersPerSite)
	bb, _ := sn.Site("site-b")
	assert.Empty(t, bb.Providers, "refused rows are not ingested")
	_, ok := sn.Site("site-z")
	assert.False(t, ok)

	// Counters add up over polls.
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, 6.0, r.dropped(t, signals.DropParse))
}

// TestG75_SkewDropsFutureRows: a row stamped more than 1 s after the
// response's Date, or more than a day before it, is dropped as skew; rows
// on the bounds are kept. Only the relay's clock counts: the EPP's clock
// is a day and a half ahead and does not matter.
func TestG75_SkewDropsFutureRows(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))
	ms := time.Millisecond
	rows := map[string]time.Time{
		"future-kept":    relayDate.Add(time.Second),
		"future-dropped": relayDate.Add(time.Second + ms),
		"past-kept":      relayDate.Add(-24 * time.Hour),
		"past-dropped":   relayDate.Add(-24*time.Hour - ms),
		"now":            relayDate,
	}
	var b strings.Builder
	for prov, stamp := range rows {
		b.WriteString(row(signals.NameAverageRunning, "site-b", "site-b", prov, 1, stamp))
	}
	rl.serve(b.String(), relayDate)
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, 2.0, r.dropped(t, signals.DropSkew))
	site, _ := r.store.Snapshot().Site("site-b")
	var kept []string
	for _, pr := range site.Providers {
		kept = append(kept, pr.Name)
	}
	assert.Equal(t, []string{"future-kept", "now", "past-kept"}, kept)

	// The same rows with a Date a day later: every past row is now too old.
	rl.serve(b.String(), relayDate.Add(24*time.Hour+2*time.Second))
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, 2.0+5, r.dropped(t, signals.DropSkew))
}

// TestG76_LogsOnceEachWay: one log line when polling starts failing, none
// while it keeps failing (whatever the result), one when it recovers.
func TestG76_LogsOnceEachWay(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	rl.serve(goodBody(), relayDate)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))
	const failing, recovered = "Polling the site-relay failed", "Polling the site-relay recovered"

	require.Equal(t, ResultOK, r.poll(t))
	require.Equal(t, ResultOK, r.poll(t))
	assert.Zero(t, r.log.count(failing))
	assert.Zero(t, r.log.count(recovered))

	rl.set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", 503) })
	for range 3 {
		assert.Equal(t, ResultUnreachable, r.poll(t))
	}
	rl.set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", 403) })
	assert.Equal(t, ResultUnauthorized, r.poll(t))
	assert.Equal(t, 1, r.log.count(failing), "one line when polling starts failing")
	assert.Zero(t, r.log.count(recovered))
	assert.Equal(t, 4, r.p.Status().ConsecutiveFailures)

	r.clock.Step(2 * time.Second)
	rl.serve(goodBody(), relayDate)
	for range 3 {
		require.Equal(t, ResultOK, r.poll(t))
	}
	assert.Equal(t, 1, r.log.count(failing))
	assert.Equal(t, 1, r.log.count(recovered), "one line when it recovers")
	assert.Equal(t, 1, r.log.count(`"failedPolls"=4`))

	// A second outage logs once more each way.
	rl.set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", 503) })
	r.poll(t)
	r.poll(t)
	rl.serve(goodBody(), relayDate)
	r.poll(t)
	assert.Equal(t, 2, r.log.count(failing))
	assert.Equal(t, 2, r.log.count(recovered))
}

// TestG02_G03_RowsOfUnknownSitesAreSiteMismatch is the EPP's side of G-02 and
// G-03: the EPP trusts its verified relay for the sites of its topology
// only; rows tagged with any other site (or another cluster of a known
// site) are dropped as site_mismatch and never reach the store, and the
// store follows the topology when a site is added.
func TestG02_G03_RowsOfUnknownSitesAreSiteMismatch(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	body := goodBody() + batch("site-d", "site-d", "pool", relayDate, 5) + peerRounds("site-d", relayDate, 1, relayDate)
	rl.serve(body, relayDate)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, 9.0, r.dropped(t, signals.DropSiteMismatch))
	_, ok := r.store.Snapshot().Site("site-d")
	assert.False(t, ok)

	r.top.SetExporting([]string{"site-b", "site-c", "site-d"})
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, 9.0, r.dropped(t, signals.DropSiteMismatch), "a site of the topology is accepted")
	d, ok := r.store.Snapshot().Site("site-d")
	require.True(t, ok)
	assert.Len(t, d.Providers, 1)
}

// TestRunPollsEveryInterval: Run polls at once and then on every tick of
// its clock, and stops with its context.
func TestRunPollsEveryInterval(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	rl.serve(goodBody(), relayDate)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()), func(o *Options) { o.Interval = 500 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.p.Run(ctx); close(done) }()
	waitPolls := func(n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return rl.requests.Load() == n }, 5*time.Second, time.Millisecond)
	}
	waitPolls(1)
	for i := int64(2); i <= 4; i++ {
		require.Eventually(t, r.clock.HasWaiters, 5*time.Second, time.Millisecond)
		r.clock.Step(499 * time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		assert.Equal(t, i-1, rl.requests.Load(), "no poll before the interval")
		r.clock.Step(time.Millisecond)
		waitPolls(i)
	}
	cancel()
	<-done
	assert.Equal(t, 1, r.log.count("Polling the local site-relay"))
}

func TestNewErrors(t *testing.T) {
	_, err := New(Options{URL: "https://relay:1"})
	require.Error(t, err)
	for _, want := range []string{"no TLS configuration", "no site store", "no topology"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = New(Options{URL: "http://relay:1"})
	require.ErrorContains(t, err, "scheme must be https")
}

// TestStatusIsSafeToRead while polls run (with -race).
func TestStatusIsSafeToRead(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	rl.serve(goodBody(), relayDate)
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()))
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			_ = r.p.Status().LastDropped["parse"]
		}
	}()
	for range 20 {
		r.poll(t)
	}
	stop.Store(true)
	<-done
}

// TestShutdownIsNoFailure: a poll cut short by the end of Run's context
// (shutdown) is not a failure of the relay: it is not counted in
// grid_signals_poll_total, not logged as an error and leaves Status as it
// was; Poll with an ended context does not even call the relay. A poll
// that its own timeout ends is still unreachable, counted and logged. No
// goroutine outlives the test.
func TestShutdownIsNoFailure(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // runs last, after the relay's Close
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	arrived := make(chan struct{}, 1)
	rl.set(func(_ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // hangs until the client gives up
	})
	r := newRig(t, rl.url(), p.clientTLS(p.relay.Identity()), func(o *Options) { o.Timeout = 300 * time.Millisecond })
	const failing = "Polling the site-relay failed"
	noneCounted := func(when string) {
		t.Helper()
		for _, res := range Results {
			assert.Zero(t, r.polls(t, res), "%s: grid_signals_poll_total{result=%q}", when, res)
		}
		assert.Zero(t, r.log.count(failing), "%s: a failure logged", when)
		assert.Zero(t, r.log.count(`"error"=`), "%s: an error logged", when)
		st := r.p.Status()
		assert.Equal(t, Abandoned, st.LastResult, when)
		assert.Zero(t, st.ConsecutiveFailures, when)
		assert.True(t, st.LastAttempt.IsZero(), when)
	}

	// Shutdown while a poll waits on the relay.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.p.Run(ctx); close(done) }()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the poll never reached the relay")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	noneCounted("shutdown during a poll")
	assert.Equal(t, 1, r.log.count("Polling the local site-relay"), "the start line only")

	// A poll started after the end: no request at all.
	n := rl.requests.Load()
	assert.Equal(t, Abandoned, r.p.Poll(ctx))
	assert.Equal(t, n, rl.requests.Load(), "Poll with an ended context called the relay")
	noneCounted("poll after shutdown")

	// The poll's own timeout is the relay's failure: counted and logged.
	assert.Equal(t, ResultUnreachable, r.p.Poll(context.Background()))
	<-arrived
	assert.Equal(t, 1.0, r.polls(t, ResultUnreachable))
	assert.Equal(t, 1, r.log.count(failing))
	assert.Equal(t, ResultUnreachable, r.p.Status().LastResult)
}
