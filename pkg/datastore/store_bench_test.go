package datastore

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func benchSpecs(n int) []EndpointSpec {
	specs := make([]EndpointSpec, n)
	for i := range specs {
		specs[i] = EndpointSpec{
			Name:    fmt.Sprintf("pod-%04d-rank-0", i),
			Address: fmt.Sprintf("127.0.%d.%d", i/250, i%250+1),
			Port:    8000,
			Labels:  map[string]string{"app": "vllm", "inference.networking.k8s.io/engine-type": "vllm"},
		}
	}
	return specs
}

// BenchmarkSnapshotReady is the request path: load the snapshot, read the
// ready endpoints. It must not allocate.
func BenchmarkSnapshotReady(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s := New(Options{})
			s.SetScrapingEnabled(true)
			if err := s.Replace(benchSpecs(n)); err != nil {
				b.Fatal(err)
			}
			targets, _ := s.Targets()
			for i, t := range targets {
				if i%2 == 0 {
					s.ReportScrape(t.ID, ScrapeResult{})
				}
			}
			s.Flush()
			b.ReportAllocs()
			total := 0
			for b.Loop() {
				sn := s.Snapshot()
				total += len(sn.Ready())
				if sn.FailOpen() {
					b.Fatal("fail-open")
				}
			}
			if total == 0 {
				b.Fatal("no ready endpoints")
			}
		})
	}
}

// BenchmarkSnapshotRoutable is the request path since eligibility: load
// the snapshot, read the routable endpoints (precomputed at publish). It
// must not allocate.
func BenchmarkSnapshotRoutable(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s := New(Options{})
			s.SetScrapingEnabled(true)
			if err := s.Replace(benchSpecs(n)); err != nil {
				b.Fatal(err)
			}
			targets, _ := s.Targets()
			for i, t := range targets {
				if i%2 == 0 {
					s.ReportScrape(t.ID, ScrapeResult{})
				}
			}
			s.Flush()
			for _, e := range s.Snapshot().All()[:n/5] {
				h, _ := scheduling.HealthKey.Get(e)
				h.SetBreaker(scheduling.BreakerOpen, time.Now().Add(time.Hour))
			}
			s.Flush()
			b.ReportAllocs()
			total := 0
			for b.Loop() {
				sn := s.Snapshot()
				total += len(sn.Routable())
				if sn.RoutableFailOpen() {
					b.Fatal("fail-open")
				}
			}
			if total == 0 {
				b.Fatal("no routable endpoints")
			}
		})
	}
}

// BenchmarkSnapshotLookups covers the subset-hint and served-endpoint
// lookups of the request path.
func BenchmarkSnapshotLookups(b *testing.B) {
	s := New(Options{})
	if err := s.Replace(benchSpecs(1000)); err != nil {
		b.Fatal(err)
	}
	sn := s.Snapshot()
	ep := sn.All()[500]
	hp, ip := ep.HostPort(), ep.Metadata().Address
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := sn.ByHostPort(hp); !ok {
			b.Fatal("not found")
		}
		if len(sn.ByIP(ip)) != 1 || sn.Stale(ep) {
			b.Fatal("bad lookup")
		}
	}
}

func BenchmarkStatsStartFinish(b *testing.B) {
	var st EndpointStats
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			st.Start(100)
			st.FirstToken(20 * time.Millisecond)
			st.Finish(100, 200*time.Millisecond, true)
		}
	})
}

// BenchmarkReplace1000 replaces a 1000-endpoint set with one where every
// tenth endpoint moved (a resync).
func BenchmarkReplace1000(b *testing.B) {
	s := New(Options{})
	a, c := benchSpecs(1000), benchSpecs(1000)
	for i := 0; i < len(c); i += 10 {
		c[i].Port = 9000
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		specs := a
		if i%2 == 1 {
			specs = c
		}
		if err := s.Replace(specs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublish1000 is one coalesced publish after a round of 1000
// scrape reports.
func BenchmarkPublish1000(b *testing.B) {
	s := New(Options{})
	s.SetScrapingEnabled(true)
	if err := s.Replace(benchSpecs(1000)); err != nil {
		b.Fatal(err)
	}
	targets, _ := s.Targets()
	b.ReportAllocs()
	for b.Loop() {
		for _, t := range targets {
			s.ReportScrape(t.ID, ScrapeResult{})
		}
		s.Flush()
	}
}
