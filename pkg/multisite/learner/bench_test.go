package learner

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// benchSites returns a topology of n sites (the local one and n-1 peers,
// each serving two of eight models) and the rows of one relay read at
// stamp.
func benchSites(b *testing.B, n int) (*topology.Topology, func(stamp time.Time) []signals.Sample) {
	b.Helper()
	var peers []topology.Site
	for i := 1; i < n; i++ {
		peers = append(peers, topology.Site{
			Name: fmt.Sprintf("s%02d", i), Cluster: fmt.Sprintf("cs%02d", i), Gateway: fmt.Sprintf("127.0.0.%d:8443", i+1),
			Models: []string{fmt.Sprintf("m%d", i%8), fmt.Sprintf("m%d", (i+1)%8)},
		})
	}
	top, skipped := topology.Build(topology.Local{Site: "a", Cluster: "ca"}, peers, nil)
	if len(skipped) > 0 {
		b.Fatal(skipped)
	}
	rows := func(stamp time.Time) []signals.Sample {
		var out []signals.Sample
		for i, s := range top.Sites() {
			l := ld{running: float64(3 + i%5), queue: float64(i%3) * 0.5, ready: 4, kv: 0.3}
			for _, sm := range batch(s.Name, "p", 1, stamp, l) {
				sm.Cluster = s.Cluster
				out = append(out, sm)
			}
			if !s.Local {
				out = append(out, rounds(s.Name, stamp, 10)...)
			}
		}
		return out
	}
	return top, rows
}

// BenchmarkStep is the control step after a poll that brought a new
// sample of every site.
func BenchmarkStep(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		b.Run(fmt.Sprintf("sites=%d", n), func(b *testing.B) {
			top, rows := benchSites(b, n)
			st := sitestore.New(top)
			m, err := NewMetrics(nil)
			if err != nil {
				b.Fatal(err)
			}
			set := DefaultSettings()
			set.Shedding = true
			l := New(Options{Settings: set, Metrics: m, Health: fakeHealth{}})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				at := t0.Add(time.Duration(i) * time.Second)
				st.Ingest(rows(at), at, at)
				sn := st.Snapshot()
				b.StartTimer()
				l.Step(at, top, sn)
			}
		})
	}
}

// BenchmarkStepTick is the control step on a health tick (no new sample).
func BenchmarkStepTick(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		b.Run(fmt.Sprintf("sites=%d", n), func(b *testing.B) {
			top, rows := benchSites(b, n)
			st := sitestore.New(top)
			st.Ingest(rows(t0), t0, t0)
			sn := st.Snapshot()
			m, _ := NewMetrics(nil)
			l := New(Options{Settings: DefaultSettings(), Metrics: m})
			b.ReportAllocs()
			for b.Loop() {
				l.Step(t0, top, sn)
			}
		})
	}
}
