package relay

import (
	"bytes"
	"encoding/json"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ConditionMetricsAvailable is the provider condition of G-50.
const ConditionMetricsAvailable = "MetricsAvailable"

// Condition is a Kubernetes-style condition.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // True, False or Unknown
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// maxConditionMessage bounds a condition message (errors can quote
// bodies).
const maxConditionMessage = 1024

func newCondition(now time.Time, status, reason, msg string) Condition {
	return Condition{Type: ConditionMetricsAvailable, Status: status, Reason: reason, Message: clip(msg), LastTransitionTime: now.UTC().Truncate(time.Second)}
}

// update returns c with a new status, reason and message; the transition
// time moves only when the status changes.
func (c Condition) update(now time.Time, status, reason, msg string) Condition {
	if c.Status == status {
		c.Reason, c.Message = reason, clip(msg)
		return c
	}
	return newCondition(now, status, reason, msg)
}

func clip(s string) string {
	if len(s) > maxConditionMessage {
		return s[:maxConditionMessage] + "…"
	}
	return s
}

// Status is the relay's state as /status serves it.
type Status struct {
	Site      string           `json:"site"`
	Cluster   string           `json:"cluster"`
	Time      time.Time        `json:"time"`
	Providers []ProviderStatus `json:"providers"`
	Peers     []PeerStatus     `json:"peers"`
}

// ProviderStatus is one of this site's providers.
type ProviderStatus struct {
	Name          string `json:"name"`
	Endpoint      string `json:"endpoint,omitempty"`
	PublishesLoad bool   `json:"publishesLoad"`
	// Generation is the generation of the last qualified batch.
	Generation uint64 `json:"generation,omitempty"`
	// LastScrapeTime is the end of the last scrape attempt;
	// LastReadTime the instant of the last batch read.
	LastScrapeTime *time.Time `json:"lastScrapeTime,omitempty"`
	LastReadTime   *time.Time `json:"lastReadTime,omitempty"`
	// Serving says whether the last batch is still relayed (it is until
	// staleMetricsSeconds after it was read, G-08; then a ready endpoints
	// 0 row is).
	Serving    bool        `json:"serving"`
	Conditions []Condition `json:"conditions"`
}

// PeerStatus is one peer relay.
type PeerStatus struct {
	Site            string     `json:"site"`
	URL             string     `json:"url"`
	Identity        string     `json:"identity"`
	LastOutcome     string     `json:"lastOutcome,omitempty"`
	Message         string     `json:"message,omitempty"`
	LastSuccessTime *time.Time `json:"lastSuccessTime,omitempty"`
	Rounds          uint64     `json:"rounds"`
	LastRoundEnd    *time.Time `json:"lastRoundEnd,omitempty"`
	Providers       int        `json:"providers"`
	Rows            int        `json:"rows"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// Status returns the relay's state now.
func (r *Relay) Status() Status {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Site: r.cfg.Site, Cluster: r.cfg.Cluster, Time: now.UTC(), Providers: []ProviderStatus{}, Peers: []PeerStatus{}}
	for _, ps := range r.providers {
		p := ProviderStatus{Name: ps.cfg.Name, Generation: ps.generation, LastScrapeTime: timePtr(ps.lastScrape), Conditions: []Condition{ps.cond}}
		if mc := ps.cfg.MetricsConfig; mc != nil {
			p.Endpoint = mc.Endpoint
			p.PublishesLoad = true
			if ps.last != nil {
				p.LastReadTime = timePtr(ps.last.readAt)
				p.Serving = now.Sub(ps.last.readAt) <= time.Duration(mc.StaleMetricsSeconds)*time.Second
			}
		}
		st.Providers = append(st.Providers, p)
	}
	for _, pe := range r.peers {
		st.Peers = append(st.Peers, PeerStatus{
			Site: pe.cfg.Site, URL: pe.url, Identity: pe.cfg.Identity.String(),
			LastOutcome: pe.lastOutcome, Message: clip(pe.lastMessage), LastSuccessTime: timePtr(pe.lastSuccess),
			Rounds: pe.rounds, LastRoundEnd: timePtr(pe.roundEnd), Providers: len(pe.known), Rows: len(pe.samples),
		})
	}
	return st
}

// AdminHandler serves the admin port: /healthz (the process runs),
// /readyz (Run serves), /status (Status as JSON) and /metrics.
func (r *Relay) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-r.ready:
			_, _ = w.Write([]byte("ok\n"))
		default:
			http.Error(w, "not serving yet", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r.Status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg, MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	return mux
}

// writeJSONError answers an OpenAI-style JSON error.
func writeJSONError(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Switchyard-Reason", reason)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": reason, "code": code}})
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer {
	b := bufPool.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putBuffer(b *bytes.Buffer) {
	if b.Cap() <= 2<<20 {
		bufPool.Put(b)
	}
}

// httpErrorLog sends net/http's server errors (TLS handshake failures,
// mostly) to the logger at V(1).
func httpErrorLog(l logr.Logger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}

type logWriter struct{ l logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// limitListener accepts at most n connections at once; more wait in the
// kernel's backlog.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
