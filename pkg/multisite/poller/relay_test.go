package poller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

var (
	local = topology.Local{Site: "site-a", Cluster: "cluster-a"}
	// relayDate is the relay's clock; the EPP's fake clock is a day and a
	// half off, so that only the relay's Date judges its stamps.
	relayDate = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eppNow    = relayDate.Add(36 * time.Hour)
)

// pki is a trust domain with the local relay, the EPP and an impostor.
type pki struct {
	ca, other    *tlstest.CA
	relay, epp   *tlstest.Leaf
	peerB        *tlstest.Leaf // another site's relay, same CA
	selfRelay    *tlstest.Leaf // the relay's SPIFFE ID, self-signed
	otherCARelay *tlstest.Leaf // the relay's SPIFFE ID from another CA
}

func newPKI(t *testing.T) *pki {
	ca, other := tlstest.NewCA(t, "grid"), tlstest.NewCA(t, "rogue")
	relayID := tlsutil.SiteSPIFFEID(tlstest.TrustDomain, "site-a")
	return &pki{
		ca: ca, other: other,
		relay:        ca.SiteLeaf(t, "site-a"),
		epp:          ca.Issue(t, "spiffe://"+tlstest.TrustDomain+"/epp/site-a"),
		peerB:        ca.SiteLeaf(t, "site-b"),
		selfRelay:    tlstest.SelfSigned(t, relayID),
		otherCARelay: other.Issue(t, relayID),
	}
}

// clientTLS is the EPP's side: its certificate, the relay's expected
// identity checked against the CA.
func (p *pki) clientTLS(expect tlsutil.Identity) *tls.Config {
	return tlsutil.ClientConfig("relay.site-a", func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &p.epp.TLS, nil },
		tlsutil.VerifyPeer([]tlsutil.Identity{expect}, p.ca.Pool, x509.ExtKeyUsageServerAuth))
}

// relay is a relay-like HTTPS server on 127.0.0.1: it presents cert,
// requires a client certificate and answers 403 unless it proves the
// EPP's identity (or, with handshakeVerify, refuses it in the handshake),
// then serves what respond writes.
type relay struct {
	srv      *httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	respond  func(w http.ResponseWriter, r *http.Request)
}

func startRelay(t *testing.T, p *pki, cert *tlstest.Leaf, handshakeVerify func(tls.ConnectionState) error) *relay {
	t.Helper()
	rl := &relay{}
	accept := tlsutil.PeerVerifier{Accept: []tlsutil.Identity{p.epp.Identity()}, Roots: p.ca.Pool, Usage: x509.ExtKeyUsageClientAuth}
	rl.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rl.requests.Add(1)
		if _, err := accept.Verify(r.TLS.PeerCertificates); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		rl.mu.Lock()
		f := rl.respond
		rl.mu.Unlock()
		if f == nil {
			http.Error(w, "no body yet", http.StatusServiceUnavailable)
			return
		}
		f(w, r)
	}))
	rl.srv.TLS = tlsutil.MutualServerConfig(tlsutil.Static(cert.TLS), handshakeVerify)
	rl.srv.TLS.Certificates = []tls.Certificate{cert.TLS}
	rl.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rl.srv.StartTLS()
	t.Cleanup(rl.srv.Close)
	return rl
}

func (rl *relay) url() string { return rl.srv.URL + signals.Path }

func (rl *relay) set(f func(w http.ResponseWriter, r *http.Request)) {
	rl.mu.Lock()
	rl.respond = f
	rl.mu.Unlock()
}

// serve makes the relay answer body with this Date (a zero date: no Date
// header at all).
func (rl *relay) serve(body string, date time.Time) {
	rl.set(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", signals.ContentType)
		if date.IsZero() {
			w.Header()["Date"] = nil // net/http would add one
		} else {
			w.Header().Set("Date", date.UTC().Format(http.TimeFormat))
		}
		_, _ = io.WriteString(w, body)
	})
}

// row formats one line of the wire format.
func row(name, site, cluster, provider string, v float64, stamp time.Time) string {
	labels := `grid_site="` + site + `"`
	if provider != "" || cluster != "" {
		labels += `,grid_cluster="` + cluster + `",grid_provider="` + provider + `"`
	}
	return fmt.Sprintf("%s{%s} %s %d\n", name, labels, strconv.FormatFloat(v, 'g', -1, 64), stamp.UnixMilli())
}

// batch is a provider's qualified batch.
func batch(site, cluster, provider string, stamp time.Time, running float64) string {
	var b strings.Builder
	b.WriteString(row(signals.NameConfigGeneration, site, cluster, provider, 42, stamp))
	b.WriteString(row(signals.NamePublishesLoad, site, cluster, provider, 1, stamp))
	for i, n := range signals.PoolSeries {
		v := float64(i)
		if n == signals.NameAverageRunning {
			v = running
		}
		b.WriteString(row(n, site, cluster, provider, v, stamp))
	}
	return b.String()
}

func peerRounds(site string, end time.Time, n int, stamp time.Time) string {
	return row(signals.NamePeerRoundEnd, site, "", "", float64(end.UnixMilli())/1000, stamp) +
		row(signals.NamePeerRounds, site, "", "", float64(n), stamp)
}

// threeSites is the topology of the tests: the local site and two peers.
func threeSites(t *testing.T) *topology.Watcher {
	t.Helper()
	w, err := topology.NewWatcher(topology.Options{Local: local})
	require.NoError(t, err)
	w.SetExporting([]string{"site-b", "site-c"}) // sites named after their clusters
	return w
}

// logLines records log lines at verbosity 0.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
	}, funcr.Options{})
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// rig is a poller of a relay, with its store, metrics, log and clock.
type rig struct {
	p     *Poller
	store *sitestore.Store
	top   *topology.Watcher
	reg   *prometheus.Registry
	log   *logLines
	clock *testingclock.FakeClock
}

func newRig(t *testing.T, url string, cfg *tls.Config, mutate ...func(*Options)) *rig {
	t.Helper()
	top := threeSites(t)
	r := &rig{store: sitestore.New(top.Topology()), top: top, reg: prometheus.NewRegistry(), log: &logLines{}, clock: testingclock.NewFakeClock(eppNow)}
	top.OnChange(r.store.SetTopology)
	opts := Options{URL: url, TLS: cfg, Store: r.store, Topology: top.Topology, Registerer: r.reg, Logger: r.log.logger(), Clock: r.clock, Timeout: time.Second}
	for _, m := range mutate {
		m(&opts)
	}
	var err error
	r.p, err = New(opts)
	require.NoError(t, err)
	t.Cleanup(r.p.client.CloseIdleConnections)
	return r
}

func (r *rig) poll(t *testing.T) Result {
	t.Helper()
	return r.p.Poll(context.Background())
}

// metric returns the value of a series (labels as name=value pairs).
func (r *rig) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	fams, err := r.reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func matches(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}

func (r *rig) polls(t *testing.T, res Result) float64 {
	return r.metric(t, "grid_signals_poll_total", "result", string(res))
}

func (r *rig) dropped(t *testing.T, reason signals.DropReason) float64 {
	return r.metric(t, "grid_signals_ingest_dropped_total", "reason", string(reason))
}

// bodyOf encodes samples as a relay would.
func bodyOf(t *testing.T, samples []signals.Sample) string {
	t.Helper()
	var buf bytes.Buffer
	_, err := signals.Encode(&buf, samples, func(s string) bool { return s == local.Site }, signals.Limits{MaxBytes: signals.RelayMaxBytes})
	require.NoError(t, err)
	return buf.String()
}
