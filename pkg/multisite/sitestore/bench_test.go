package sitestore

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// fullBody returns a relay body just under 768 KiB (the relay's bound,
// G-71): sites sites of 64 providers, several batches per target, and
// the topology that knows them.
func fullBody(b *testing.B) ([]byte, *topology.Topology) {
	b.Helper()
	const sites, providers = 16, 64
	var file []topology.Site
	var samples []signals.Sample
	for s := range sites {
		site := fmt.Sprintf("site-%02d", s)
		cluster := "cluster-" + site
		if s > 0 {
			file = append(file, topology.Site{Name: site, Cluster: cluster, Gateway: site + ".example:443"})
			samples = append(samples, rounds(site, date, 100, date)...)
		}
		for p := range providers {
			for r := range 1 {
				samples = append(samples, batch(site, cluster, fmt.Sprintf("pool-%02d", p), 42, date.Add(-time.Duration(r)*time.Second), float64(p+r))...)
			}
		}
	}
	top, _ := topology.Build(topology.Local{Site: "site-00", Cluster: "cluster-site-00"}, file, nil)
	var buf bytes.Buffer
	trunc, err := signals.Encode(&buf, samples, func(s string) bool { return s == "site-00" }, signals.Limits{MaxBytes: signals.RelayMaxBytes})
	if err != nil {
		b.Fatal(err)
	}
	if buf.Len() < signals.RelayMaxBytes*9/10 || trunc.Empty() {
		b.Fatalf("body of %d bytes (truncation %+v): the fleet should fill the relay's bound", buf.Len(), trunc)
	}
	return buf.Bytes(), top
}

// BenchmarkIngest768KiB: the EPP's work per poll of a full relay body:
// parse (signals.Parse, with the skew rule and the topology's site check)
// then merge into the store and publish a snapshot; and the merge alone.
func BenchmarkIngest768KiB(b *testing.B) {
	body, top := fullBody(b)
	opts := signals.ParseOptions{Date: date, SiteAllowed: top.Has}
	res, err := signals.Parse(bytes.NewReader(body), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("body %d bytes, %d rows", len(body), len(res.Samples))
	b.Run("parse+ingest", func(b *testing.B) {
		s := New(top)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			res, err := signals.Parse(bytes.NewReader(body), opts)
			if err != nil {
				b.Fatal(err)
			}
			s.Ingest(res.Samples, date, time.Now())
		}
	})
	b.Run("ingest", func(b *testing.B) {
		s := New(top)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			s.Ingest(res.Samples, date, time.Now())
		}
	})
}

// BenchmarkSnapshot: the request path's read.
func BenchmarkSnapshot(b *testing.B) {
	_, top := fullBody(b)
	s := New(top)
	b.ReportAllocs()
	for b.Loop() {
		if s.Snapshot() == nil {
			b.Fatal("nil snapshot")
		}
	}
}
