package relay

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
)

// benchRelay is a relay of 64 providers with two peers of 64 providers
// each, every batch read: the largest regular body to the EPP.
func benchRelay(b *testing.B) *Relay {
	b.Helper()
	now := t0
	cfg := &Config{Site: "site-0", Cluster: "cluster-0"}
	r := &Relay{cfg: cfg, clock: realClock{}}
	for i := range MaxProviders {
		p := Provider{Name: fmt.Sprintf("pool-%02d", i), MetricsConfig: &MetricsConfig{StaleMetricsSeconds: 30}}
		bt := &batch{readAt: now}
		for j := range bt.values {
			bt.values[j], bt.present[j] = float64(i+j)+0.5, true
		}
		r.providers = append(r.providers, &providerState{cfg: p, last: bt, generation: 1234567890123})
	}
	for s := 1; s <= 2; s++ {
		site := fmt.Sprintf("site-%d", s)
		p := &peerState{cfg: Peer{Site: site}, known: map[string]*peerProvider{}, rounds: 42, roundEnd: now}
		for i := range MaxProviders {
			name := fmt.Sprintf("pool-%02d", i)
			p.known[name] = &peerProvider{cluster: "cluster-x", says: true, loadReceived: true}
			for j, series := range signals.PoolSeries {
				p.samples = append(p.samples, signals.Sample{Name: series, Site: site, Cluster: "cluster-x", Provider: name, Value: float64(j), Stamp: now})
			}
			p.samples = append(p.samples, signals.Sample{Name: signals.NameConfigGeneration, Site: site, Cluster: "cluster-x", Provider: name, Value: 99, Stamp: now})
		}
		r.peers = append(r.peers, p)
	}
	m, err := newRelayMetrics(prometheus.NewRegistry(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	r.m = m
	return r
}

// BenchmarkAssemble64Providers: what one EPP poll costs the relay: the
// rows of three sites of 64 providers assembled and encoded.
func BenchmarkAssemble64Providers(b *testing.B) {
	r := benchRelay(b)
	now := t0.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		samples := r.assemble(now, true)
		if _, err := signals.Encode(io.Discard, samples, r.isLocal, signals.Limits{MaxBytes: signals.RelayMaxBytes}); err != nil {
			b.Fatal(err)
		}
	}
}
