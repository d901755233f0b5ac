package poller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// Result is the outcome of one poll, the result label of
// grid_signals_poll_total; the set is closed (Results).
type Result string

// Poll results (G-72).
const (
	// ResultOK: the relay proved its identity and answered 200 with a
	// Date header and a body within the limit; the rows were ingested.
	ResultOK Result = "ok"
	// ResultUnreachable: dialing or the request timed out or failed (a
	// refused or reset connection, a broken body), or the relay answered
	// a status other than 200, 401 and 403 (a redirect is not followed:
	// the EPP polls its local relay only).
	ResultUnreachable Result = "unreachable"
	// ResultUnauthorized: the relay refused us: a TLS alert in the
	// handshake (our client certificate rejected), or HTTP 401 or 403.
	ResultUnauthorized Result = "unauthorized"
	// ResultTooLarge: the body is over 1 MiB (G-70), by Content-Length
	// or by what was read; nothing of it is ingested.
	ResultTooLarge Result = "too_large"
	// ResultNoDate: the Date header is missing or cannot be parsed; the
	// skew rule needs it, so nothing is ingested.
	ResultNoDate Result = "no_date"
	// ResultBadIdentity: the relay's certificate does not prove the
	// expected identity (SPIFFE ID or pin), or its chain does not verify
	// against the CA bundle, or it sent none.
	ResultBadIdentity Result = "bad_identity"
)

// Results lists every Result, for initialising metric labels.
var Results = [...]Result{ResultOK, ResultUnreachable, ResultUnauthorized, ResultTooLarge, ResultNoDate, ResultBadIdentity}

// Defaults of Options.
const (
	// DefaultInterval is how often the local relay is polled (the public
	// grid operator configures 500 ms for the local relay).
	DefaultInterval = 500 * time.Millisecond
	// DefaultTimeout bounds one poll, dial included (public default 2 s).
	DefaultTimeout = 2 * time.Second
	// MaxBytes is the most a poll reads (G-70).
	MaxBytes = signals.DefaultMaxBytes
	// maxHeaderBytes bounds the response headers.
	maxHeaderBytes = 64 << 10
)

// Options configure a Poller.
type Options struct {
	// URL is the local relay's signals endpoint,
	// https://<relay-service>:<port>/v1/site/signals (an empty path means
	// signals.Path). The poller polls this relay and no other (G-04).
	URL string
	// TLS is the client's TLS configuration: its client certificate, and
	// the relay's expected identity checked in the handshake, e.g.
	// tlsutil.ClientConfig(name, reloader.GetClientCertificate,
	// tlsutil.VerifyPeer(...)). A *tlsutil.PeerError from the check is
	// counted as bad_identity. Required.
	TLS *tls.Config
	// Interval is the poll period; 0 means DefaultInterval.
	Interval time.Duration
	// Timeout bounds one poll; 0 means DefaultTimeout.
	Timeout time.Duration
	// Store receives the rows of every successful poll. Required.
	Store *sitestore.Store
	// Topology returns the current topology: rows of other sites are
	// dropped (site_mismatch). Required.
	Topology func() *topology.Topology
	// Registerer receives the grid_signals_* metrics; nil registers
	// nothing.
	Registerer prometheus.Registerer
	// Logger receives the poller's logs. The zero value discards.
	Logger logr.Logger
	// Clock is the poller's clock (ticks, read times, the last success
	// timestamp); nil means the real one. Unit tests use a fake.
	Clock clock.WithTicker
	// OnIngest, when set, is called after every successful poll's rows
	// are in the store (in the poll's goroutine): the EPP runs its
	// multi-site control step on it. It must not block.
	OnIngest func()
}

// ValidateURL checks the relay URL and returns it with the default path.
func ValidateURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return nil, errors.New("empty")
	case err != nil:
		return nil, fmt.Errorf("not a URL: %w", err)
	case u.Scheme != "https":
		return nil, fmt.Errorf("%q: the scheme must be https (the relay is polled over mutual TLS)", raw)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%q has no host", raw)
	case u.User != nil:
		return nil, fmt.Errorf("%q: no user information allowed", raw)
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(raw, "?") || strings.HasSuffix(raw, "#"):
		return nil, fmt.Errorf("%q: no query or fragment allowed", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = signals.Path
	}
	return u, nil
}

// Status is the poller's state, for /debug/sites.
type Status struct {
	URL                 string         `json:"url"`
	Interval            string         `json:"interval"`
	LastAttempt         time.Time      `json:"lastAttempt,omitzero"`
	LastResult          Result         `json:"lastResult,omitempty"`
	LastError           string         `json:"lastError,omitempty"`
	LastSuccess         time.Time      `json:"lastSuccess,omitzero"`
	LastBytes           int            `json:"lastResponseBytes,omitempty"`
	LastRows            int            `json:"lastRows,omitempty"`
	LastDropped         map[string]int `json:"lastDropped,omitempty"`
	ConsecutiveFailures int            `json:"consecutiveFailures,omitempty"`
}

// Poller polls the local site-relay and feeds the site store.
type Poller struct {
	opts   Options
	url    string
	client *http.Client
	clock  clock.WithTicker
	log    logr.Logger

	polls       *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	respBytes   prometheus.Gauge
	dropped     *prometheus.CounterVec

	mu       sync.Mutex // serializes polls
	failing  bool
	failedAt time.Time
	failures int
	status   atomic.Pointer[Status]
}

// New checks the options, registers the metrics and returns a poller; Run
// polls.
func New(opts Options) (*Poller, error) {
	u, err := ValidateURL(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("relay URL: %w", err)
	}
	var errs []string
	if opts.TLS == nil {
		errs = append(errs, "no TLS configuration (the relay is polled over mutual TLS)")
	}
	if opts.Store == nil {
		errs = append(errs, "no site store")
	}
	if opts.Topology == nil {
		errs = append(errs, "no topology")
	}
	if opts.Interval < 0 || opts.Timeout < 0 {
		errs = append(errs, "negative interval or timeout")
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	p := &Poller{opts: opts, url: u.String(), clock: opts.Clock, log: opts.Logger}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.log.GetSink() == nil {
		p.log = logr.Discard()
	}
	p.log = p.log.WithValues("relay", p.url)
	dialer := &net.Dialer{Timeout: opts.Timeout, KeepAlive: 30 * time.Second}
	p.client = &http.Client{
		Transport: &http.Transport{
			// The local relay only: no proxy from the environment.
			Proxy:                  nil,
			DialContext:            dialer.DialContext,
			TLSClientConfig:        opts.TLS.Clone(),
			TLSHandshakeTimeout:    opts.Timeout,
			ResponseHeaderTimeout:  opts.Timeout,
			MaxResponseHeaderBytes: maxHeaderBytes,
			// The size read is the size sent: no transparent gzip.
			DisableCompression:  true,
			MaxIdleConns:        1,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     90 * time.Second,
		},
		// A redirect is not followed: it could point anywhere but the
		// local relay (G-04).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       opts.Timeout,
	}
	if err := p.registerMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	p.status.Store(&Status{URL: p.url, Interval: opts.Interval.String()})
	return p, nil
}

func (p *Poller) registerMetrics(reg prometheus.Registerer) error {
	p.polls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grid_signals_poll_total",
		Help: "Polls of the local site-relay by result: ok, unreachable (dial, timeout or an unexpected status), unauthorized (TLS alert, 401 or 403), too_large (body over 1 MiB), no_date (Date header missing or unparsable), bad_identity (the relay's certificate is not the expected identity).",
	}, []string{"result"})
	p.lastSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "grid_signals_last_success_timestamp_seconds",
		Help: "Unix time of the last ok poll of the local site-relay.",
	})
	p.respBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "grid_signals_response_bytes",
		Help: "Size of the last successful response of the local site-relay, against the 1 MiB read ceiling.",
	})
	p.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grid_signals_ingest_dropped_total",
		Help: "Rows of the site-relay's responses the EPP refused, by reason: skew (stamped more than 1 s after the response's Date or more than 1 day before it), site_mismatch (a site or cluster the topology does not hold), cap (beyond 64 providers per site or 4096 lines per target), parse (malformed).",
	}, []string{"reason"})
	for _, r := range Results {
		p.polls.WithLabelValues(string(r))
	}
	for _, r := range signals.DropReasons {
		p.dropped.WithLabelValues(string(r))
	}
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{p.polls, p.lastSuccess, p.respBytes, p.dropped} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("signals poller metrics: %w", err)
		}
	}
	return nil
}

// Status returns the poller's state.
func (p *Poller) Status() Status {
	st := *p.status.Load()
	return st
}

// Run polls every Interval until ctx ends, the first poll at once.
func (p *Poller) Run(ctx context.Context) {
	p.log.Info("Polling the local site-relay", "interval", p.opts.Interval, "timeout", p.opts.Timeout)
	t := p.clock.NewTicker(p.opts.Interval)
	defer t.Stop()
	defer p.client.CloseIdleConnections()
	for {
		// A tick and the end of ctx can be ready together, and select
		// picks either: do not start a poll that shutdown would cancel.
		if ctx.Err() != nil {
			return
		}
		p.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// outcome is one poll's result and what it read.
type outcome struct {
	result  Result
	err     error
	bytes   int
	rows    int
	dropped map[signals.DropReason]int
	date    time.Time
	readAt  time.Time
}

// Abandoned is what Poll returns for a poll that ctx's end cut short
// (shutdown): not a result of the relay, so it is neither counted in
// grid_signals_poll_total nor logged as a failure, and Status keeps the
// last real poll. It is not one of Results.
const Abandoned Result = ""

// Poll polls the relay once, updates the metrics, the store and the
// log, and returns the result, or Abandoned when ctx ended before the
// poll could succeed (then nothing is recorded).
func (p *Poller) Poll(ctx context.Context) Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ctx.Err() != nil {
		return Abandoned
	}
	start := p.clock.Now()
	o := p.poll(ctx)
	if o.result != ResultOK && ctx.Err() != nil {
		// Our caller's context ended (shutdown), not the poll's own
		// timeout: whatever failed, the relay did not fail.
		p.log.V(1).Info("Poll of the site-relay abandoned: shutting down", "error", o.err)
		return Abandoned
	}
	p.polls.WithLabelValues(string(o.result)).Inc()
	for reason, n := range o.dropped {
		p.dropped.WithLabelValues(string(reason)).Add(float64(n))
	}
	st := *p.status.Load()
	st.LastAttempt, st.LastResult = start, o.result
	st.LastError = ""
	if o.err != nil {
		st.LastError = o.err.Error()
	}
	if o.result == ResultOK {
		p.lastSuccess.Set(float64(o.readAt.UnixMilli()) / 1000)
		p.respBytes.Set(float64(o.bytes))
		st.LastSuccess, st.LastBytes, st.LastRows = o.readAt, o.bytes, o.rows
		st.LastDropped = nil
		for reason, n := range o.dropped {
			if st.LastDropped == nil {
				st.LastDropped = map[string]int{}
			}
			st.LastDropped[string(reason)] = n
		}
		st.ConsecutiveFailures = 0
		if p.failing {
			// G-76: one line when polling recovers.
			p.log.Info("Polling the site-relay recovered", "failedPolls", p.failures, "failingFor", o.readAt.Sub(p.failedAt).Round(time.Millisecond))
		}
		p.failing, p.failures = false, 0
		if len(o.dropped) > 0 {
			p.log.V(1).Info("Rows of the site-relay refused", "dropped", st.LastDropped)
		}
	} else {
		st.ConsecutiveFailures++
		p.failures++
		if !p.failing {
			// G-76: one line when polling starts failing.
			p.failing, p.failedAt = true, start
			p.log.Error(o.err, "Polling the site-relay failed; sites' load is not updated until it recovers", "result", o.result)
		} else {
			p.log.V(1).Info("Polling the site-relay still fails", "result", o.result, "error", o.err.Error(), "failedPolls", p.failures)
		}
	}
	p.status.Store(&st)
	return o.result
}

func (p *Poller) poll(ctx context.Context) outcome {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return outcome{result: ResultUnreachable, err: err}
	}
	req.Header.Set("Accept", signals.ContentType)
	resp, err := p.client.Do(req)
	if err != nil {
		return outcome{result: classify(err), err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		return outcome{result: ResultUnauthorized, err: fmt.Errorf("the relay answered %s", resp.Status)}
	default:
		return outcome{result: ResultUnreachable, err: fmt.Errorf("the relay answered %s", resp.Status)}
	}
	if resp.ContentLength > MaxBytes {
		return outcome{result: ResultTooLarge, err: fmt.Errorf("the body is %d bytes, more than the %d-byte limit", resp.ContentLength, MaxBytes)}
	}
	date, err := responseDate(resp.Header)
	if err != nil {
		return outcome{result: ResultNoDate, err: err}
	}
	top := p.opts.Topology()
	res, err := signals.Parse(resp.Body, signals.ParseOptions{
		Limits:      signals.Limits{MaxBytes: MaxBytes},
		Date:        date,
		SiteAllowed: top.Has,
	})
	switch {
	case errors.Is(err, signals.ErrTooLarge):
		return outcome{result: ResultTooLarge, err: fmt.Errorf("the body is more than the %d-byte limit", MaxBytes)}
	case err != nil:
		return outcome{result: classify(err), err: fmt.Errorf("reading the body: %w", err)}
	}
	readAt := p.clock.Now()
	ing := p.opts.Store.Ingest(res.Samples, date, readAt)
	if p.opts.OnIngest != nil {
		p.opts.OnIngest()
	}
	dropped := res.Dropped
	if ing.SiteMismatch > 0 || ing.Cap > 0 {
		if dropped == nil {
			dropped = map[signals.DropReason]int{}
		}
		dropped[signals.DropSiteMismatch] += ing.SiteMismatch
		dropped[signals.DropCap] += ing.Cap
		for k, v := range dropped {
			if v == 0 {
				delete(dropped, k)
			}
		}
	}
	if res.FirstParseError != nil {
		p.log.V(1).Info("Malformed rows in the site-relay's response", "first", res.FirstParseError.Error(), "rows", res.Dropped[signals.DropParse])
	}
	return outcome{result: ResultOK, bytes: res.Bytes, rows: len(res.Samples) - ing.SiteMismatch - ing.Cap, dropped: dropped, date: date, readAt: readAt}
}

// responseDate parses the Date header (RFC 1123, or the other forms HTTP
// allows).
func responseDate(h http.Header) (time.Time, error) {
	v := h.Get("Date")
	if v == "" {
		return time.Time{}, errors.New("the response has no Date header")
	}
	d, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("the Date header %q cannot be parsed", v)
	}
	return d, nil
}

// classify maps a transport error to a result: a refused identity is
// bad_identity, a TLS alert from the relay unauthorized, anything else
// (dial, timeout, reset, a server that does not speak TLS) unreachable.
func classify(err error) Result {
	if tlsutil.IsPeerError(err) {
		return ResultBadIdentity
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return ResultUnauthorized
	}
	var alert tls.AlertError
	if errors.As(err, &alert) {
		return ResultUnauthorized
	}
	return ResultUnreachable
}
