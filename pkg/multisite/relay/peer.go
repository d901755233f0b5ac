package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// peerState is what the relay knows of one peer. cfg and client are set
// once; the rest is guarded by Relay.mu.
type peerState struct {
	cfg    Peer
	url    string
	client *http.Client

	samples     []signals.Sample         // the last accepted rows, re-stamped on this relay's clock
	stamps      map[seriesKey]restamp    // per series of a known provider: the peer's last stamp and the re-stamp given to it
	known       map[string]*peerProvider // the peer's providers seen since start
	rounds      uint64                   // poll rounds that tried the peer
	roundEnd    time.Time                // end of the last of them
	lastOutcome string
	lastMessage string
	lastSuccess time.Time
	failing     bool
}

// seriesKey is one series of one of a peer's providers.
type seriesKey struct{ provider, name string }

// restamp is the stamp a peer gave a row and the one this relay gave it.
type restamp struct{ peer, local time.Time }

// peerProvider is one of a peer's providers.
type peerProvider struct {
	cluster      string
	says         bool // the peer's own publishes_load (true until it says 0)
	loadReceived bool // load rows received since this relay started (G-47 b)
}

func newPeerState(p Peer, cfg *Config, clientCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error), roots func() *x509.CertPool) *peerState {
	serverName := p.ServerName
	if serverName == "" {
		serverName = hostOf(p)
	}
	tlsCfg := tlsutil.ClientConfig(serverName, clientCert,
		tlsutil.VerifyPeer([]tlsutil.Identity{p.Identity}, roots, x509.ExtKeyUsageServerAuth))
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.RequestTimeout,
		MaxIdleConns:          1,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       4 * cfg.PeerPollInterval,
	}
	return &peerState{
		cfg:    p,
		url:    p.URL(),
		client: &http.Client{Transport: tr, Timeout: cfg.RequestTimeout, CheckRedirect: noRedirects},
		known:  map[string]*peerProvider{},
		stamps: map[seriesKey]restamp{},
	}
}

// noRedirects makes the client return a redirect as it is (then polled as
// bad_status): the peer's address is the configuration's, and a redirect
// must not move the poll to another host.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// pollResult is one poll of one peer.
type pollResult struct {
	outcome string
	err     error
	res     signals.Result
	now     time.Time // the peer's clock reading (X-Grid-Now-Ms, else its Date)
	recv    time.Time // when the body was read, on this relay's clock
}

// poll asks the peer for its rows. Only its verified identity makes the
// rows its own: the body must carry its site and nothing else
// (ExpectedSite, G-02).
func (p *peerState) poll(ctx context.Context, now func() time.Time) pollResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return pollResult{outcome: OutcomeUnreachable, err: err}
	}
	req.Header.Set("Accept", signals.ContentType)
	resp, err := p.client.Do(req)
	if err != nil {
		return pollResult{outcome: classify(err), err: err}
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		return pollResult{outcome: OutcomeUnauthorized, err: fmt.Errorf("GET %s: %s: %s", p.url, resp.Status, snippet(resp.Body))}
	default:
		if loc := resp.Header.Get("Location"); loc != "" {
			return pollResult{outcome: OutcomeBadStatus, err: fmt.Errorf("GET %s: %s to %.200q: redirects are not followed", p.url, resp.Status, loc)}
		}
		return pollResult{outcome: OutcomeBadStatus, err: fmt.Errorf("GET %s: %s", p.url, resp.Status)}
	}
	date, peerNow, err := signals.ResponseClock(resp.Header)
	if err != nil {
		return pollResult{outcome: OutcomeNoDate, err: fmt.Errorf("GET %s: %w", p.url, err)}
	}
	// Rows beyond 4096 per target are kept here and cut when the body to
	// the EPP is assembled, where the cut is counted (G-71); the 1 MiB read
	// bound holds the rest.
	res, err := signals.Parse(resp.Body, signals.ParseOptions{Date: date, ExpectedSite: p.cfg.Site,
		Limits: signals.Limits{MaxBytes: signals.DefaultMaxBytes, MaxLinesPerTarget: math.MaxInt32, MaxProvidersPerSite: signals.DefaultMaxProvidersPerSite}})
	if errors.Is(err, signals.ErrTooLarge) {
		return pollResult{outcome: OutcomeTooLarge, err: fmt.Errorf("GET %s: the body is larger than %d bytes", p.url, signals.DefaultMaxBytes)}
	}
	if err != nil {
		return pollResult{outcome: OutcomeUnreachable, err: fmt.Errorf("GET %s: read body: %w", p.url, err)}
	}
	return pollResult{outcome: OutcomeOK, res: res, now: peerNow, recv: now()}
}

// snippet reads the start of an error body for messages.
func snippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 256))
	return string(b)
}

// classify maps a transport error: a certificate that does not prove the
// peer's identity is bad_identity; a TLS alert from the peer (it refused
// our certificate) is unauthorized; anything else (dial, timeout, a
// connection cut) is unreachable.
func classify(err error) string {
	if tlsutil.IsPeerError(err) {
		return OutcomeBadIdentity
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return OutcomeUnauthorized
	}
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return OutcomeUnauthorized
	}
	return OutcomeUnreachable
}

// PollRound polls every peer once, concurrently, and records the results
// and the round's end (G-41, §2.11 #5). Run calls it every
// peerPollInterval; tests call it directly with a fake clock.
func (r *Relay) PollRound(ctx context.Context) {
	results := make([]pollResult, len(r.peers))
	var wg sync.WaitGroup
	for i, p := range r.peers {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
			defer cancel()
			results[i] = p.poll(pctx, r.clock.Now)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: the round did not happen
	}
	end := r.clock.Now()
	r.m.rounds.Inc()
	for i, p := range r.peers {
		r.applyPoll(p, results[i], end)
	}
}

// applyPoll records one peer's poll result at the end of its round.
func (r *Relay) applyPoll(p *peerState, res pollResult, end time.Time) {
	site := p.cfg.Site
	r.m.peerPolls.WithLabelValues(site, res.outcome).Inc()
	r.mu.Lock()
	defer r.mu.Unlock()
	p.rounds++
	p.roundEnd = end
	prev := p.lastOutcome
	p.lastOutcome = res.outcome
	if res.outcome != OutcomeOK {
		p.lastMessage = res.err.Error()
		if !p.failing {
			p.failing = true
			r.log.Error(res.err, "polling a peer relay started failing; its rows are kept with their stamps", "peer", site, "outcome", res.outcome)
		} else if prev != res.outcome {
			r.log.V(1).Info("polling a peer relay still fails", "peer", site, "outcome", res.outcome, "error", res.err.Error())
		}
		return
	}
	p.lastMessage = ""
	p.lastSuccess = end
	r.m.peerLastOK.WithLabelValues(site).Set(float64(end.UnixMilli()) / 1e3)
	if p.failing {
		p.failing = false
		r.log.Info("polling a peer relay recovered", "peer", site)
	}
	for reason, n := range res.res.Dropped {
		r.m.peerDropped.WithLabelValues(site, string(reason)).Add(float64(n))
	}
	if res.res.FirstParseError != nil {
		r.log.V(1).Info("a peer's body has malformed rows", "peer", site, "error", res.res.FirstParseError.Error())
	}
	p.accept(res, func(reason signals.DropReason) { r.m.peerDropped.WithLabelValues(site, string(reason)).Inc() })
}

// accept keeps the rows of a successful poll, re-stamped on this relay's
// clock (see restamp). The peer's publishes_load rows are not relayed as
// they are: this relay states its own (see rows). The re-stamps of a
// series are kept while its provider is known, also across polls whose
// body leaves the series out, so a series that comes back with the same
// peer stamp keeps its re-stamp (it is no new sample); they are bounded
// by the known providers (at most MaxProvidersPerSite) times the closed
// set of provider series. Called with Relay.mu held.
func (p *peerState) accept(res pollResult, drop func(signals.DropReason)) {
	samples := make([]signals.Sample, 0, len(res.res.Samples))
	// The body's providers, all of them before any is forgotten: the body
	// is sorted by provider, so a new name read early must not make the
	// providers read later look absent. Parse holds them to
	// MaxProvidersPerSite, so once the absent ones are forgotten every
	// provider of the body has room.
	present := map[string]bool{}
	for _, s := range res.res.Samples {
		if signals.IsProviderSeries(s.Name) {
			present[s.Provider] = true
		}
	}
	forgot := false
	for _, s := range res.res.Samples {
		if !signals.IsProviderSeries(s.Name) {
			drop(signals.DropParse) // a peer serves only its own providers' rows
			continue
		}
		pp := p.known[s.Provider]
		if pp == nil {
			if len(p.known) >= signals.DefaultMaxProvidersPerSite && !forgot {
				p.forgetAbsent(present)
				forgot = true
			}
			if len(p.known) >= signals.DefaultMaxProvidersPerSite {
				drop(signals.DropCap)
				continue
			}
			pp = &peerProvider{says: true}
			p.known[s.Provider] = pp
		}
		pp.cluster = s.Cluster
		switch s.Name {
		case signals.NamePublishesLoad:
			pp.says = s.Value == 1
			continue
		case signals.NameConfigGeneration:
		case signals.NameReadyEndpoints:
			// A lone readiness 0 is what a peer serves once its scrape
			// has failed past staleMetricsSeconds (G-08): no load.
			if s.Value != 0 {
				pp.loadReceived = true
			}
		default:
			pp.loadReceived = true
		}
		k := seriesKey{s.Provider, s.Name}
		st := p.restamp(k, s.Stamp, res)
		p.stamps[k] = restamp{peer: s.Stamp, local: st}
		s.Stamp = st
		samples = append(samples, s)
	}
	p.samples = samples
}

// restamp gives a peer row a stamp on this relay's clock, keeping its age
// at the peer (the peer's clock reading minus its stamp, both from the
// peer's clock), so clock offsets between sites never enter (G-75):
// stamp = receipt − age. The peer's reading is X-Grid-Now-Ms, exact to the
// millisecond; a peer that sends only Date (one-second precision) makes
// the age up to a second short. Either way a re-stamp is given once: while
// the peer's stamp of the series is unchanged the row keeps the re-stamp
// it got (an unchanged row is never a new sample), and a row with another
// peer stamp gets a re-stamp later than the last one (a new sample is
// never older than the one before). The result is never later than the
// receipt, unless it has to pass the last re-stamp.
func (p *peerState) restamp(k seriesKey, peerStamp time.Time, res pollResult) time.Time {
	prev, ok := p.stamps[k]
	if ok && prev.peer.Equal(peerStamp) {
		return prev.local
	}
	age := max(res.now.Sub(peerStamp), 0)
	st := res.recv.Add(-age).Truncate(time.Millisecond)
	if ok && !st.After(prev.local) {
		st = prev.local.Add(time.Millisecond)
	}
	return st
}

// forgetAbsent drops the known providers absent from the current body
// (present: every provider of the whole body), with their series'
// re-stamps, so a peer renaming its providers cannot
// grow either past the cap.
func (p *peerState) forgetAbsent(present map[string]bool) {
	for name := range p.known {
		if !present[name] {
			delete(p.known, name)
		}
	}
	for k := range p.stamps {
		if p.known[k.provider] == nil {
			delete(p.stamps, k)
		}
	}
}

// rows appends the peer's rows served to the local EPP at now: its round
// end and round count (once a round tried it), its last accepted rows
// (while younger than the skew window of a day), and a publishes_load row
// per known provider: 1 when the peer says so and this relay has received
// load rows for it since it started (G-47 b). Called with Relay.mu held.
func (p *peerState) rows(now time.Time, out []signals.Sample) []signals.Sample {
	site := p.cfg.Site
	if p.rounds > 0 {
		out = append(out,
			signals.Sample{Name: signals.NamePeerRoundEnd, Site: site, Value: float64(p.roundEnd.UnixMilli()) / 1e3, Stamp: p.roundEnd},
			signals.Sample{Name: signals.NamePeerRounds, Site: site, Value: float64(p.rounds), Stamp: p.roundEnd})
	}
	for _, s := range p.samples {
		if now.Sub(s.Stamp) < signals.MaxAge {
			out = append(out, s)
		}
	}
	for name, pp := range p.known {
		v := 0.0
		if pp.says && pp.loadReceived {
			v = 1
		}
		out = append(out, signals.Sample{Name: signals.NamePublishesLoad, Site: site, Cluster: pp.cluster, Provider: name, Value: v, Stamp: now})
	}
	return out
}
