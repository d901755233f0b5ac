package pickmetrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestLimiter(t *testing.T) {
	l := NewLimiter(2)
	if got := l.Bound("a"); got != "a" {
		t.Errorf("Bound(a) = %q", got)
	}
	if got := l.Bound("b"); got != "b" {
		t.Errorf("Bound(b) = %q", got)
	}
	if got := l.Bound("c"); got != OverflowLabelValue {
		t.Errorf("Bound(c) = %q, want %q beyond the cap", got, OverflowLabelValue)
	}
	if got := l.Bound("a"); got != "a" {
		t.Errorf("an admitted value must keep mapping to itself, got %q", got)
	}
	long := strings.Repeat("é", MaxLabelValueBytes) // 2 bytes each
	l2 := NewLimiter(10)
	got := l2.Bound(long)
	if len(got) > MaxLabelValueBytes || !strings.HasPrefix(long, got) {
		t.Errorf("long value not cut at a rune boundary: %d bytes", len(got))
	}
	if got := l2.Bound("\xff"); got != "\uFFFD" {
		t.Errorf("invalid UTF-8 = %q", got)
	}
}

func TestVecsAreShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	a, err := NewCounterVec(reg, opts, []string{"backend"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCounterVec(reg, opts, []string{"backend"})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("a second registration must reuse the first vector and its cap")
	}
	if _, err := NewGaugeVec(reg, prometheus.GaugeOpts{Name: "x_total", Help: "x"}, []string{"backend"}); err == nil {
		t.Error("a gauge under a counter's name must fail")
	}
	g, err := NewGaugeVec(reg, prometheus.GaugeOpts{Name: "y", Help: "y"}, []string{"backend"})
	if err != nil {
		t.Fatal(err)
	}
	g.WithLabelValues("e").Set(1)
	if n := count(t, g); n != 1 {
		t.Errorf("gauge series = %d", n)
	}
}

func TestChildren(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec, err := NewCounterVec(reg, prometheus.CounterOpts{Name: "z_total", Help: "z"}, []string{"picker", "backend"})
	if err != nil {
		t.Fatal(err)
	}
	c := NewChildren(vec.Backends, func(b string) prometheus.Counter { return vec.WithLabelValues("p", b) })
	for i := range MaxBackendLabelValues + 10 {
		c.Get(fmt.Sprintf("ep-%d", i)).Inc()
	}
	c.Get("ep-0").Inc()
	if n := count(t, vec); n != MaxBackendLabelValues+1 {
		t.Errorf("series = %d, want %d (the cap plus %q)", n, MaxBackendLabelValues+1, OverflowLabelValue)
	}
	if got := value(t, vec.WithLabelValues("p", OverflowLabelValue)); got != 10 {
		t.Errorf("other = %v, want 10", got)
	}
	if got := value(t, vec.WithLabelValues("p", "ep-0")); got != 2 {
		t.Errorf("ep-0 = %v, want 2", got)
	}
	if n := vec.DeletePartialMatch(prometheus.Labels{"picker": "p"}); n != MaxBackendLabelValues+1 {
		t.Errorf("deleted %d", n)
	}
}

func BenchmarkChildrenGet(b *testing.B) {
	reg := prometheus.NewRegistry()
	vec, _ := NewCounterVec(reg, prometheus.CounterOpts{Name: "z_total", Help: "z"}, []string{"picker", "backend"})
	c := NewChildren(vec.Backends, func(s string) prometheus.Counter { return vec.WithLabelValues("p", s) })
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("ep-%d", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Get(names[i%100]).Inc()
	}
}

// count returns the number of series c collects.
func count(t *testing.T, c prometheus.Collector) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// value returns a counter's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
