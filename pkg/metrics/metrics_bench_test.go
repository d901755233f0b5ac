package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestPath is every request-path call one routed request makes.
func requestPath(m *Metrics, model, target string) {
	m.RequestReceived(model, target, 0)
	m.RunningRequests(model, 1)
	m.RequestSize(model, target, 1234)
	m.SchedulerE2E(150 * time.Microsecond)
	m.SchedulerAttempt(true, target, "pod-1", "ns", 8000)
	m.TTFT(model, target, 80*time.Millisecond)
	m.ResponseSize(model, target, 4321)
	m.RequestDuration(model, target, 900*time.Millisecond)
	m.Tokens(model, target, 100, 50, 20)
	m.NormalizedTPOT(model, target, 900*time.Millisecond, 50)
	m.RunningRequests(model, -1)
}

func newBench(b *testing.B) *Metrics {
	m, err := New(prometheus.NewRegistry(), "pool")
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// TestRequestPathZeroAllocs: once a label combination was seen, the
// request path allocates nothing.
func TestRequestPathZeroAllocs(t *testing.T) {
	m, _ := newTest(t)
	model, target := "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"
	requestPath(m, model, target)
	m.RequestError(model, target, ErrorCodeServiceUnavailable)
	m.Refusal("saturated")
	// Fresh strings with equal content, as a request would bring.
	model2, target2 := string([]byte(model)), string([]byte(target))
	allocs := testing.AllocsPerRun(100, func() {
		requestPath(m, model2, target2)
		m.RequestError(model2, target2, ErrorCodeServiceUnavailable)
		m.Refusal("saturated")
	})
	if allocs != 0 {
		t.Fatalf("request path allocates %.1f times per request on a cache hit, want 0", allocs)
	}
}

func BenchmarkRequestPath(b *testing.B) {
	m := newBench(b)
	requestPath(m, "model", "target")
	b.ReportAllocs()
	for b.Loop() {
		requestPath(m, "model", "target")
	}
}

func BenchmarkRequestPathParallel(b *testing.B) {
	m := newBench(b)
	requestPath(m, "model", "target")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			requestPath(m, "model", "target")
		}
	})
}

func BenchmarkCalls(b *testing.B) {
	m := newBench(b)
	requestPath(m, "model", "target")
	m.RequestError("model", "target", ErrorCodeInternal)
	m.Refusal("saturated")
	calls := []struct {
		name string
		f    func()
	}{
		{"RequestReceived", func() { m.RequestReceived("model", "target", 0) }},
		{"RequestError", func() { m.RequestError("model", "target", ErrorCodeInternal) }},
		{"RequestSize", func() { m.RequestSize("model", "target", 1234) }},
		{"ResponseSize", func() { m.ResponseSize("model", "target", 1234) }},
		{"RequestDuration", func() { m.RequestDuration("model", "target", time.Second) }},
		{"Tokens", func() { m.Tokens("model", "target", 100, 50, 20) }},
		{"NormalizedTPOT", func() { m.NormalizedTPOT("model", "target", time.Second, 50) }},
		{"TTFT", func() { m.TTFT("model", "target", time.Second) }},
		{"RunningRequests", func() { m.RunningRequests("model", 1) }},
		{"SchedulerE2E", func() { m.SchedulerE2E(time.Millisecond) }},
		{"SchedulerAttempt", func() { m.SchedulerAttempt(true, "target", "pod-1", "ns", 8000) }},
		{"Refusal", func() { m.Refusal("saturated") }},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.f()
			}
		})
	}
}

// BenchmarkOverflow: a model past the cap (slow path every time).
func BenchmarkOverflow(b *testing.B) {
	m := newBench(b)
	m.models.n.Store(m.models.max)
	b.ReportAllocs()
	for b.Loop() {
		m.RequestSize("unadmitted", "unadmitted", 1)
	}
}

func BenchmarkUpdatePool(b *testing.B) {
	m := newBench(b)
	samples := make([]PoolSample, 100)
	for i := range samples {
		samples[i] = PoolSample{Name: "pod-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Ready: i%10 != 0, Queue: i, Running: i, KVUsage: 0.5}
	}
	b.ReportAllocs()
	for b.Loop() {
		m.UpdatePool(samples)
	}
}
