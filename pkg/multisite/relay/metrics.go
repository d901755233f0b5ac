package relay

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
)

// Peer poll outcomes (grid_peer_poll_total{outcome}), a closed set.
const (
	OutcomeOK           = "ok"           // a body read and parsed
	OutcomeUnreachable  = "unreachable"  // dial, TLS handshake I/O, timeout, connection lost
	OutcomeBadIdentity  = "bad_identity" // the peer's certificate is not its expected identity (G-02)
	OutcomeUnauthorized = "unauthorized" // the peer refused us: a TLS alert, or HTTP 401/403
	OutcomeBadStatus    = "bad_status"   // another HTTP status than 200
	OutcomeTooLarge     = "too_large"    // a body above 1 MiB
	OutcomeNoDate       = "no_date"      // no Date header, or one that does not parse
)

// Outcomes lists every peer poll outcome.
var Outcomes = []string{OutcomeOK, OutcomeUnreachable, OutcomeBadIdentity, OutcomeUnauthorized, OutcomeBadStatus, OutcomeTooLarge, OutcomeNoDate}

// Clients of the signals endpoint (grid_relay_signals_requests_total).
const (
	ClientLocalEPP = "local_epp" // the local EPP: every site's rows
	ClientPeer     = "peer"      // a peer relay: this site's rows only
	ClientRefused  = "refused"   // an identity that is neither (403)
)

// Metric names.
const (
	MetricPeerPolls       = "grid_peer_poll_total"
	MetricPeerLastSuccess = "grid_peer_poll_last_success_timestamp_seconds"
	MetricPeerRounds      = "grid_peer_poll_rounds_total"
	MetricPeerDropped     = "grid_peer_ingest_dropped_total"
	MetricTruncated       = "grid_signals_relay_truncated_total"
	MetricRequests        = "grid_relay_signals_requests_total"
	MetricResponseBytes   = "grid_relay_signals_response_bytes"
	MetricScrapes         = "grid_relay_scrapes_total"
	MetricMetricsAvail    = "grid_provider_metrics_available"
	MetricUnattributed    = "grid_relay_scrape_unattributed_series_total"
)

type relayMetrics struct {
	peerPolls     *prometheus.CounterVec
	peerLastOK    *prometheus.GaugeVec
	rounds        prometheus.Counter
	peerDropped   *prometheus.CounterVec
	truncated     *prometheus.CounterVec
	requests      *prometheus.CounterVec
	responseBytes *prometheus.GaugeVec
	scrapes       *prometheus.CounterVec
	available     *prometheus.GaugeVec
	unattributed  prometheus.Counter
}

func newRelayMetrics(reg prometheus.Registerer, cfg *Config) (*relayMetrics, error) {
	m := &relayMetrics{
		peerPolls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPeerPolls,
			Help: "Polls of peer relays, by peer site and outcome (ok, unreachable, bad_identity, unauthorized, bad_status, too_large, no_date)."}, []string{"peer", "outcome"}),
		peerLastOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricPeerLastSuccess,
			Help: "Unix time of the last ok poll of each peer relay (0 before the first)."}, []string{"peer"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricPeerRounds,
			Help: "Peer poll rounds completed (each round tries every peer)."}),
		peerDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPeerDropped,
			Help: "Rows of peer bodies refused, by peer and reason (skew, site_mismatch, cap, parse)."}, []string{"peer", "reason"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricTruncated,
			Help: "What the relay left out of its bodies to the local EPP to stay under 768 KiB: whole targets (cut=target) and rows beyond 4096 per target (cut=lines), by store (local: this site's rows, peer: peers' rows)."}, []string{"store", "cut"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRequests,
			Help: "Requests for /v1/site/signals, by verified client (local_epp, peer, refused)."}, []string{"client"}),
		responseBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricResponseBytes,
			Help: "Size in bytes of the last signals body served, by client (local_epp, peer)."}, []string{"client"}),
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricScrapes,
			Help: "Scrapes of the site's EPP metrics, by provider and result (ok, incomplete, failed, http_status, unauthorized, too_large, malformed, no_series, token_file)."}, []string{"provider", "result"}),
		available: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricMetricsAvail,
			Help: "1 while the provider's MetricsAvailable condition is True, 0 otherwise."}, []string{"provider"}),
		unattributed: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricUnattributed,
			Help: "EPP pool series without a name (or, for flow control, inference_pool) label on a metrics endpoint serving several providers: not attributed to any provider, not read."}),
	}
	for _, c := range []prometheus.Collector{m.peerPolls, m.peerLastOK, m.rounds, m.peerDropped, m.truncated, m.requests, m.responseBytes, m.scrapes, m.available, m.unattributed} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("relay: metrics already registered (one relay per registry): %w", err)
			}
			return nil, fmt.Errorf("relay: register metrics: %w", err)
		}
	}
	// Every label combination exists from the start (closed sets).
	for _, p := range cfg.Peers {
		for _, o := range Outcomes {
			m.peerPolls.WithLabelValues(p.Site, o)
		}
		m.peerLastOK.WithLabelValues(p.Site)
		for _, r := range signals.DropReasons {
			m.peerDropped.WithLabelValues(p.Site, string(r))
		}
	}
	for _, s := range []string{signals.StoreLocal, signals.StorePeer} {
		for _, c := range []string{signals.CutTarget, signals.CutLines} {
			m.truncated.WithLabelValues(s, c)
		}
	}
	for _, c := range []string{ClientLocalEPP, ClientPeer, ClientRefused} {
		m.requests.WithLabelValues(c)
	}
	m.responseBytes.WithLabelValues(ClientLocalEPP)
	m.responseBytes.WithLabelValues(ClientPeer)
	for _, p := range cfg.Providers {
		if p.MetricsConfig != nil {
			for _, r := range scrapeResults {
				m.scrapes.WithLabelValues(p.Name, r)
			}
		}
		m.available.WithLabelValues(p.Name)
	}
	return m, nil
}
