package kvsaturation

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

var t0 = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

func newAdmitter(t testing.TB, raw string, reg *prometheus.Registry) *Admitter {
	t.Helper()
	var r json.RawMessage
	if raw != "" {
		r = json.RawMessage(raw)
	}
	h := scheduling.NewHandle(scheduling.HandleOptions{Context: context.Background(), Registerer: reg, Seed: 1})
	pl, err := Registration.Factory(Type, r, h)
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	a := pl.(*Admitter)
	a.now = func() time.Time { return t0 }
	return a
}

// kv builds an endpoint with a KV usage scraped age ago (negative: never).
func kv(name string, usage float64, age time.Duration) *scheduling.Endpoint {
	b := schedulingtest.Endpoint(name).KVCache(usage)
	if age >= 0 {
		b = b.UpdateTime(t0.Add(-age))
	}
	return b.Build()
}

// C-35: refused (503, Retry-After, admission_reject) only when every
// healthy candidate has fresh KV usage above the threshold; a candidate
// without fresh metrics counts as not saturated.
func TestC35_RefusesOnlyWhenEveryHealthyCandidateIsSaturated(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newAdmitter(t, `{"scrapeInterval": "1s", "retryAfter": "2s"}`, reg)
	unhealthy := scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "sick"}, scheduling.Metrics{KVCacheUsagePercent: 0.1, UpdateTime: t0},
		map[string]any{scheduling.HealthKey.Name(): newHealth(scheduling.ProbeUnhealthy)})
	for _, tc := range []struct {
		name   string
		cands  []*scheduling.Endpoint
		refuse bool
	}{
		{"all above", []*scheduling.Endpoint{kv("a", 0.99, 0), kv("b", 1, time.Second)}, true},
		{"one at the threshold", []*scheduling.Endpoint{kv("a", 0.99, 0), kv("b", 0.98, 0)}, false},
		{"one below", []*scheduling.Endpoint{kv("a", 0.99, 0), kv("b", 0.5, 0)}, false},
		{"one stale", []*scheduling.Endpoint{kv("a", 0.99, 0), kv("b", 0.99, 3*time.Second+1)}, false},
		{"one never scraped", []*scheduling.Endpoint{kv("a", 0.99, 0), kv("b", 0, -1)}, false},
		{"misreporting above 1 is clamped, still saturated", []*scheduling.Endpoint{kv("a", 7, 0)}, true},
		{"an unhealthy idle candidate does not count", []*scheduling.Endpoint{kv("a", 0.99, 0), unhealthy}, true},
		{"no healthy candidate", []*scheduling.Endpoint{unhealthy}, false},
		{"none", nil, false},
	} {
		r := a.Admit(context.Background(), &scheduling.Request{ID: "r"}, tc.cands)
		if (r != nil) != tc.refuse {
			t.Errorf("%s: refusal = %+v, want refused %v", tc.name, r, tc.refuse)
			continue
		}
		if r != nil && (r.StatusCode != http.StatusServiceUnavailable || r.Reason != ReasonAdmissionReject || r.RetryAfter != 2*time.Second || !strings.Contains(r.Message, "0.98")) {
			t.Errorf("%s: refusal = %+v", tc.name, r)
		}
	}
	// Only the candidates serving the request's model count.
	served := func(name, model string, usage float64) *scheduling.Endpoint {
		return schedulingtest.Endpoint(name).KVCache(usage).UpdateTime(t0).Models(scheduling.ModelEntry{Name: model, Aliases: []string{model + "-alias"}}).Build()
	}
	mixed := []*scheduling.Endpoint{served("big-0", "big", 0.99), served("small-0", "small", 0.1), served("big-1", "big", 1)}
	if r := a.Admit(context.Background(), &scheduling.Request{TargetModel: "big"}, mixed); r == nil {
		t.Error("an idle engine of another model must not admit a request for saturated big")
	}
	if r := a.Admit(context.Background(), &scheduling.Request{TargetModel: "big-alias"}, mixed); r == nil {
		t.Error("aliases resolve")
	}
	if r := a.Admit(context.Background(), &scheduling.Request{TargetModel: "small"}, mixed); r != nil {
		t.Errorf("small is not saturated: %+v", r)
	}
	if r := a.Admit(context.Background(), &scheduling.Request{TargetModel: "other"}, mixed); r != nil {
		t.Errorf("no candidate serves other: not this admitter's refusal: %+v", r)
	}
	if got := counterValue(a.vec.WithLabelValues(Type, ReasonAdmissionReject)); got != 5 {
		t.Fatalf("refusals counted = %v, want 5", got)
	}
}

// C-35: the refusal metric's labels are a closed set.
func TestC35_RefusalMetricLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newAdmitter(t, "", reg)
	a.Admit(context.Background(), nil, []*scheduling.Endpoint{kv("a", 1, 0)})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, mf := range mfs {
		if mf.GetName() != RefusalsMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				seen = append(seen, l.GetName()+"="+l.GetValue())
			}
		}
	}
	if fmt.Sprint(seen) != "[admitter=kv-saturation-admitter reason=admission_reject]" {
		t.Fatalf("labels = %v", seen)
	}
	if fmt.Sprint(Reasons()) != "[admission_reject]" {
		t.Fatalf("reasons = %v", Reasons())
	}
	// A second instance of the same name (a reload) shares the vector;
	// closing without a successor deletes the series.
	b := newAdmitter(t, "", reg)
	b.Close(scheduling.CloseInfo{})
	if n := seriesCount(a.vec); n != 0 {
		t.Fatalf("series after close = %d", n)
	}
	a.Admit(context.Background(), nil, []*scheduling.Endpoint{kv("a", 1, 0)})
}

func TestParams(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"kvUsageThreshold": 1.2}`, "kvUsageThreshold:"},
		{`{"kvUsageThreshold": -0.1}`, "kvUsageThreshold:"},
		{`{"maxStalenessIntervals": 0}`, "maxStalenessIntervals:"},
		{`{"scrapeInterval": "x"}`, "scrapeInterval:"},
		{`{"retryAfter": "0s"}`, "retryAfter:"},
		{`{"retryAfter": "2h"}`, "retryAfter:"},
		{`{"other": 1}`, "other"},
	} {
		_, err := Registration.Factory(Type, json.RawMessage(tc.raw), schedulingtest.NewHandle(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.raw, err, tc.want)
		}
	}
	a := newAdmitter(t, "", prometheus.NewRegistry())
	if a.Horizon() != 150*time.Millisecond || a.retryAfter != time.Second {
		t.Fatalf("defaults: horizon %v retry %v", a.Horizon(), a.retryAfter)
	}
}

func newHealth(p scheduling.ProbeState) *scheduling.EndpointHealth {
	h := &scheduling.EndpointHealth{}
	h.SetProbe(p)
	return h
}

func counterValue(c prometheus.Counter) float64 {
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newAdmitter(t, "", reg)
	a.Admit(context.Background(), nil, []*scheduling.Endpoint{kv("a", 1, 0)})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

// C-21: the admitter's horizon follows the same rule as the scorer term's.
func TestC21_HorizonFollowsTheHostScrapeInterval(t *testing.T) {
	h := scheduling.NewHandle(scheduling.HandleOptions{Context: context.Background(), Registerer: prometheus.NewRegistry(), ScrapeInterval: 200 * time.Millisecond, Seed: 1})
	pl, err := Registration.Factory(Type, json.RawMessage(`{"maxStalenessIntervals": 5}`), h)
	if err != nil {
		t.Fatal(err)
	}
	a := pl.(*Admitter)
	if a.Horizon() != time.Second {
		t.Fatalf("horizon = %v, want 1s", a.Horizon())
	}
	a.now = func() time.Time { return t0 }
	if a.Admit(context.Background(), nil, []*scheduling.Endpoint{kv("a", 1, time.Second)}) == nil {
		t.Fatal("at the horizon the snapshot is fresh: refused")
	}
	if a.Admit(context.Background(), nil, []*scheduling.Endpoint{kv("a", 1, time.Second+time.Millisecond)}) != nil {
		t.Fatal("past the horizon the snapshot is stale: not saturated")
	}
}
