package gwhealth

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// fakeProbe answers from a table and records what was probed.
type fakeProbe struct {
	mu     sync.Mutex
	fail   map[string]bool
	probed []string
}

func (f *fakeProbe) probe(_ context.Context, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probed = append(f.probed, addr)
	if f.fail[addr] {
		return errors.New("connection refused")
	}
	return nil
}

func (f *fakeProbe) set(addr string, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[addr] = fail
}

func newFake(t *testing.T, targets []Target, reg prometheus.Registerer) (*Prober, *fakeProbe) {
	t.Helper()
	f := &fakeProbe{fail: map[string]bool{}}
	p, err := New(Options{Targets: func() []Target { return targets }, Probe: f.probe, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}

func TestG56_UpAfterTwoPassesDownAfterTwoFailures(t *testing.T) {
	p, f := newFake(t, []Target{{Site: "b", Gateway: "127.0.0.2:80"}}, nil)
	ctx := context.Background()
	if !p.Demoted("b", "127.0.0.2:80") {
		t.Fatal("a gateway never probed must be demoted (G-56: up only after 2 passes)")
	}
	steps := []struct {
		fail    bool
		demoted bool
	}{
		{false, true},  // one pass: still pending
		{false, false}, // two passes: up
		{true, false},  // one failure: still up
		{false, false}, // a pass resets the failures
		{true, false},
		{true, true},   // two failures in a row: down
		{false, true},  // one pass is not enough to come back
		{true, true},   // a failure resets the passes
		{false, true},  //
		{false, false}, // two passes: up again
	}
	for i, s := range steps {
		f.set("127.0.0.2:80", s.fail)
		p.Round(ctx)
		if got := p.Demoted("b", "127.0.0.2:80"); got != s.demoted {
			t.Fatalf("step %d (fail=%v): demoted %v, want %v (%+v)", i, s.fail, got, s.demoted, p.View().Sites["b"])
		}
	}
	if p.Demoted("local", "") {
		t.Fatal("a site without a gateway (the local one) is never demoted")
	}
	if !p.Demoted("new", "127.0.0.5:80") {
		t.Fatal("a site the prober has not seen yet is demoted")
	}
	if DefaultInterval != 3*time.Second || DefaultRise != 2 {
		t.Fatal("G-56: every 3 s, up after 2 passes")
	}
}

func TestG56_OnlyTheTopologyGatewaysAreProbed(t *testing.T) {
	targets := []Target{{Site: "b", Gateway: "127.0.0.2:80"}, {Site: "c", Gateway: "127.0.0.3:80"}, {Site: "d"}}
	p, f := newFake(t, targets, nil)
	p.Round(context.Background())
	if len(f.probed) != 2 {
		t.Fatalf("probed %v", f.probed)
	}
	for _, a := range f.probed {
		if a != "127.0.0.2:80" && a != "127.0.0.3:80" {
			t.Fatalf("probed %s", a)
		}
	}
	if _, ok := p.View().Sites["d"]; ok {
		t.Fatal("a site without a gateway has a state")
	}
}

func TestGatewayMovedStartsPending(t *testing.T) {
	targets := []Target{{Site: "b", Gateway: "127.0.0.2:80"}}
	f := &fakeProbe{fail: map[string]bool{}}
	var mu sync.Mutex
	p, err := New(Options{Targets: func() []Target { mu.Lock(); defer mu.Unlock(); return targets }, Probe: f.probe})
	if err != nil {
		t.Fatal(err)
	}
	p.Round(context.Background())
	p.Round(context.Background())
	if p.Demoted("b", "127.0.0.2:80") {
		t.Fatal("up")
	}
	mu.Lock()
	targets = []Target{{Site: "b", Gateway: "127.0.0.9:80"}}
	mu.Unlock()
	// Right after the move, before any round: the new address has not
	// been probed, so the site is demoted at once (the learner asks with
	// the topology's current address).
	if !p.Demoted("b", "127.0.0.9:80") {
		t.Fatal("a moved gateway is demoted before its new address is probed")
	}
	p.Round(context.Background())
	if !p.Demoted("b", "127.0.0.9:80") {
		t.Fatal("a moved gateway must pass twice again")
	}
	p.Round(context.Background())
	if p.Demoted("b", "127.0.0.9:80") {
		t.Fatal("two passes at the new address: up")
	}
}

func TestGaugeUpAndNaNWhenTheSiteLeaves(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	targets := []Target{{Site: "b", Gateway: "127.0.0.2:80"}}
	f := &fakeProbe{fail: map[string]bool{}}
	var mu sync.Mutex
	p, err := New(Options{Targets: func() []Target { mu.Lock(); defer mu.Unlock(); return targets }, Probe: f.probe, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		var m dto.Metric
		if err := p.up.WithLabelValues("b").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	p.Round(context.Background())
	if gauge() != 0 {
		t.Fatal("pending must read 0")
	}
	p.Round(context.Background())
	if gauge() != 1 {
		t.Fatal("up must read 1")
	}
	mu.Lock()
	targets = nil
	mu.Unlock()
	p.Round(context.Background())
	if !math.IsNaN(gauge()) {
		t.Fatal("a site that left reads NaN")
	}
	if !p.Demoted("b", "127.0.0.2:80") {
		t.Fatal("a site that left has no state: demoted if asked")
	}
}

// TestG56_RunProbesRealGatewaysOnLoopback runs the loop with the default
// TCP probe against a real listener on 127.0.0.1: up after two rounds,
// down after the listener closes, and Run returns with ctx (goleak).
func TestG56_RunProbesRealGatewaysOnLoopback(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	addr := lis.Addr().String()
	p, err := New(Options{Targets: func() []Target { return []Target{{Site: "b", Gateway: addr}} }, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	waitFor(t, func() bool { st, ok := p.View().Sites["b"]; return ok && st.Up })
	_ = lis.Close()
	waitFor(t, func() bool { return p.Demoted("b", addr) })
	if st := p.View().Sites["b"]; st.LastError == "" || st.Fails < 2 {
		t.Fatalf("%+v", st)
	}
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestG55_ReturnNeedsHealthAndSignals is the health half of G-55: a site
// back from a partition whose signals are back (not silent) is still
// only a last resort until its gateway passed two probes; the site stage
// sees that through the snapshot's Demoted, set from the Prober as the
// learner does.
func TestG55_ReturnNeedsHealthAndSignals(t *testing.T) {
	p, f := newFake(t, []Target{{Site: "b", Gateway: "127.0.0.2:80"}}, nil)
	f.set("127.0.0.2:80", true)
	p.Round(context.Background())
	p.Round(context.Background())
	h := &sitestate.Holder{}
	stage, err := sitestage.New(sitestage.Options{Holder: h, LocalSite: "a", Seed: 1, Affinity: sitestage.AffinityOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	snap := func() {
		b := sitestate.Site{Name: "b", Cluster: "b", Gateway: "127.0.0.2:80", Ready: true, Telemetry: true, PublishesLoad: true,
			Room: true, Rho: 0, RhoFresh: true, Capacity: 1000, CapacityKnown: true, Demoted: p.Demoted("b", "127.0.0.2:80")}
		a := sitestate.Site{Name: "a", Cluster: "a", Local: true, Ready: true, Telemetry: true, PublishesLoad: true,
			Rho: 1.5, RhoFresh: true, Queued: true, Capacity: 1, CapacityKnown: true, QueueDepth: 3}
		h.Store(&sitestate.Snapshot{Sites: []sitestate.Site{a, b}, AnyModel: true})
	}
	picks := func() int {
		n := 0
		for i := 0; i < 200; i++ {
			if stage.Decide("m", nil).Site == "b" {
				n++
			}
		}
		return n
	}
	// Signals back, health down: the overloaded local site still wins.
	snap()
	if n := picks(); n != 0 {
		t.Fatalf("b took %d requests while its gateway fails", n)
	}
	f.set("127.0.0.2:80", false)
	p.Round(context.Background())
	snap()
	if n := picks(); n != 0 {
		t.Fatalf("b took %d requests after one pass", n)
	}
	p.Round(context.Background())
	snap()
	if n := picks(); n != 200 {
		t.Fatalf("b (room) took %d of 200 after two passes", n)
	}
}

func TestDefaultProbeResolvesNoName(t *testing.T) {
	err := dialProbe(context.Background(), "gw.site-b.example:443")
	if err == nil || !strings.Contains(err.Error(), "not a literal ip:port") {
		t.Fatalf("%v", err)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("no Targets")
	}
	if _, err := New(Options{Targets: func() []Target { return nil }, Interval: -1}); err == nil {
		t.Fatal("negative interval")
	}
}
