package utilization

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func build(t *testing.T, raw string) (*Detector, error) {
	t.Helper()
	var params json.RawMessage
	if raw != "" {
		params = json.RawMessage(raw)
	}
	p, err := Registration.Factory("sd", params, schedulingtest.NewHandle(t))
	if err != nil {
		return nil, err
	}
	return p.(*Detector), nil
}

func TestParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		raw      string
		wantErrs []string // substrings, one per expected leaf error
		check    func(t *testing.T, d *Detector)
	}{
		{
			name: "no parameters gives the defaults",
			check: func(t *testing.T, d *Detector) {
				if d.queueThr != 5 || d.kvThr != 0.8 || d.staleness != 200*time.Millisecond || d.queueLim != 5 || d.kvLim != 0.8 {
					t.Errorf("defaults = %+v", *d)
				}
			},
		},
		{name: "null parameters", raw: `null`},
		{name: "empty object", raw: `{}`},
		{
			name: "every field set",
			raw:  `{"queueDepthThreshold": 8, "kvCacheUtilThreshold": 0.9, "metricsStalenessThreshold": "1.5s", "headroom": 0.5}`,
			check: func(t *testing.T, d *Detector) {
				if d.queueThr != 8 || d.kvThr != 0.9 || d.staleness != 1500*time.Millisecond || d.queueLim != 12 || math.Abs(d.kvLim-1.35) > 1e-9 {
					t.Errorf("detector = %+v", *d)
				}
			},
		},
		{name: "kv threshold of exactly 1", raw: `{"kvCacheUtilThreshold": 1}`},
		{name: "headroom above 1 is allowed", raw: `{"headroom": 2}`},
		{name: "null duration keeps the default", raw: `{"metricsStalenessThreshold": null}`, check: func(t *testing.T, d *Detector) {
			if d.staleness != 200*time.Millisecond {
				t.Errorf("staleness = %v", d.staleness)
			}
		}},
		{name: "unknown key", raw: `{"queueDepth": 5}`, wantErrs: []string{`unknown field "queueDepth"`}},
		{name: "wrong type", raw: `{"queueDepthThreshold": "5"}`, wantErrs: []string{"queueDepthThreshold: expected an integer"}},
		{name: "duration as a number", raw: `{"metricsStalenessThreshold": 200}`, wantErrs: []string{"metricsStalenessThreshold: expected a string, got number"}},
		{name: "duration without unit", raw: `{"metricsStalenessThreshold": "200"}`, wantErrs: []string{`metricsStalenessThreshold: invalid duration "200"`}},
		{name: "zero queue threshold", raw: `{"queueDepthThreshold": 0}`, wantErrs: []string{"queueDepthThreshold: must be > 0, got 0"}},
		{name: "zero kv threshold", raw: `{"kvCacheUtilThreshold": 0}`, wantErrs: []string{"kvCacheUtilThreshold: must be in (0, 1], got 0"}},
		{name: "kv threshold above 1", raw: `{"kvCacheUtilThreshold": 1.5}`, wantErrs: []string{"kvCacheUtilThreshold: must be in (0, 1], got 1.5"}},
		{name: "zero staleness", raw: `{"metricsStalenessThreshold": "0s"}`, wantErrs: []string{`metricsStalenessThreshold: must be > 0, got "0s"`}},
		{name: "negative staleness", raw: `{"metricsStalenessThreshold": "-1s"}`, wantErrs: []string{`metricsStalenessThreshold: must be > 0, got "-1s"`}},
		{name: "negative headroom", raw: `{"headroom": -0.5}`, wantErrs: []string{"headroom: must be >= 0, got -0.5"}},
		{
			name: "every problem is reported",
			raw:  `{"queueDepthThreshold": -1, "kvCacheUtilThreshold": 2, "metricsStalenessThreshold": "soon", "headroom": -1}`,
			wantErrs: []string{
				"queueDepthThreshold: must be > 0",
				"kvCacheUtilThreshold: must be in (0, 1]",
				`metricsStalenessThreshold: invalid duration "soon"`,
				"headroom: must be >= 0",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := build(t, tt.raw)
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got := d.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "sd"}) {
					t.Errorf("TypedName() = %v", got)
				}
				if tt.check != nil {
					tt.check(t, d)
				}
				return
			}
			if err == nil {
				t.Fatalf("want errors %q, got none", tt.wantErrs)
			}
			leaves := scheduling.Errors(err)
			if len(leaves) != len(tt.wantErrs) {
				t.Fatalf("got %d errors %q, want %d", len(leaves), err, len(tt.wantErrs))
			}
			for i, want := range tt.wantErrs {
				if !strings.Contains(leaves[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, leaves[i], want)
				}
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"200ms", "1s", "1m30s", "250us"} {
		var d Duration
		if err := json.Unmarshal([]byte(`"`+s+`"`), &d); err != nil {
			t.Fatalf("unmarshal %q: %v", s, err)
		}
		want, _ := time.ParseDuration(s)
		if d.Duration != want || d.parseErr != nil {
			t.Errorf("unmarshal %q = %v, %v", s, d.Duration, d.parseErr)
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := json.Unmarshal(out, &back); err != nil || back.Duration != want {
			t.Errorf("round trip of %q via %s = %v, %v", s, out, back.Duration, err)
		}
	}
	for _, raw := range []string{`true`, `[]`, `{}`, `1.5`} {
		var d Duration
		if err := json.Unmarshal([]byte(raw), &d); err == nil {
			t.Errorf("unmarshal %s: want an error", raw)
		}
	}
}

// base is the fake clock's time; endpoints scraped at base are fresh.
var base = time.Unix(1_800_000_000, 0)

type ep struct {
	queue int
	kv    float64
	age   time.Duration // how long before base the metrics were scraped; -1 = never
}

func endpoints(specs []ep) []*scheduling.Endpoint {
	return schedulingtest.Endpoints(len(specs), func(i int, b *schedulingtest.EndpointBuilder) {
		s := specs[i]
		b.Queue(s.queue).KVCache(s.kv)
		if s.age < 0 {
			b.UpdateTime(time.Time{})
		} else {
			b.UpdateTime(base.Add(-s.age))
		}
	})
}

func detector(t *testing.T, raw string) *Detector {
	t.Helper()
	d, err := build(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	d.now = func() time.Time { return base }
	return d
}

func TestSaturation(t *testing.T) {
	t.Parallel()
	// queueDepthThreshold 5, kvCacheUtilThreshold 0.9, staleness 100ms.
	const params = `{"queueDepthThreshold": 5, "kvCacheUtilThreshold": 0.9, "metricsStalenessThreshold": "100ms"}`
	tests := []struct {
		name string
		eps  []ep
		want float64
	}{
		{name: "no candidates is saturated", eps: nil, want: 1},
		{name: "idle", eps: []ep{{0, 0, 0}}, want: 0},
		{name: "kv dominates", eps: []ep{{2, 0.45, 0}}, want: 0.5},
		{name: "queue dominates", eps: []ep{{10, 0.1, 0}}, want: 2},
		{name: "kv over threshold", eps: []ep{{1, 0.99, 0}}, want: 1.1},
		{name: "stale counts as saturated", eps: []ep{{0, 0, 101 * time.Millisecond}}, want: 1},
		{name: "exactly at the staleness threshold is fresh", eps: []ep{{0, 0, 100 * time.Millisecond}}, want: 0},
		{name: "never scraped counts as saturated", eps: []ep{{0, 0, -1}}, want: 1},
		{name: "mean over candidates", eps: []ep{{0, 0, 0}, {5, 0, 0}, {0, 0.45, 0}, {0, 0, time.Second}}, want: (0 + 1 + 0.5 + 1) / 4.0},
		{name: "one hot endpoint does not saturate the pool", eps: []ep{{10, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, want: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := detector(t, params)
			got := d.Saturation(t.Context(), nil, endpoints(tt.eps))
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Saturation() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		params string
		eps    []ep
		want   []string
	}{
		{name: "all under the limits", params: `{}`, eps: []ep{{0, 0, 0}, {4, 0.79, 0}}, want: []string{"ep-0", "ep-1"}},
		{name: "queue at the threshold is removed", params: `{}`, eps: []ep{{5, 0, 0}, {4, 0, 0}}, want: []string{"ep-1"}},
		{name: "kv at the threshold is removed", params: `{}`, eps: []ep{{0, 0.8, 0}, {0, 0.7, 0}}, want: []string{"ep-1"}},
		{name: "stale is removed", params: `{}`, eps: []ep{{0, 0, 201 * time.Millisecond}, {0, 0, 0}, {0, 0, -1}}, want: []string{"ep-1"}},
		{name: "order is kept", params: `{}`, eps: []ep{{0, 0, 0}, {9, 0, 0}, {1, 0, 0}, {9, 0, 0}, {2, 0, 0}}, want: []string{"ep-0", "ep-2", "ep-4"}},
		{
			name:   "headroom relaxes the limits",
			params: `{"headroom": 0.2}`, // queue < 6, kv < 0.96
			eps:    []ep{{5, 0, 0}, {6, 0, 0}, {0, 0.95, 0}, {0, 0.96, 0}},
			want:   []string{"ep-0", "ep-2"},
		},
		{
			name:   "headroom may exceed full KV usage",
			params: `{"headroom": 0.5}`, // kv < 1.2, as in GIE (no clamp to 1)
			eps:    []ep{{0, 1, 0}},
			want:   []string{"ep-0"},
		},
		{name: "none pass: fail open", params: `{}`, eps: []ep{{9, 0, 0}, {0, 0.9, 0}, {0, 0, time.Hour}}, want: []string{"ep-0", "ep-1", "ep-2"}},
		{name: "empty input", params: `{}`, eps: nil, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := detector(t, tt.params)
			in := endpoints(tt.eps)
			before := slices.Clone(in)
			got := d.Filter(t.Context(), &scheduling.Request{}, in)
			if names := schedulingtest.Names(got); !slices.Equal(names, tt.want) {
				t.Errorf("Filter() = %v, want %v", names, tt.want)
			}
			if !slices.Equal(in, before) {
				t.Errorf("Filter modified its input")
			}
		})
	}
}

func TestFilterDoesNotAllocateWhenAllPass(t *testing.T) {
	d := detector(t, `{}`)
	eps := endpoints(make([]ep, 100))
	allocs := testing.AllocsPerRun(100, func() { d.Filter(t.Context(), nil, eps) })
	if allocs != 0 {
		t.Errorf("Filter allocated %v times per run", allocs)
	}
}

// The loader records the effective parameters as JSON; they must load
// again to the same detector.
func TestParamsRoundTrip(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.MetricsStalenessThreshold = Duration{Duration: 1500 * time.Millisecond}
	p.Headroom = 0.25
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"queueDepthThreshold":5,"kvCacheUtilThreshold":0.8,"metricsStalenessThreshold":"1.5s","headroom":0.25}`
	if string(raw) != want {
		t.Errorf("json.Marshal = %s, want %s", raw, want)
	}
	d, err := build(t, string(raw))
	if err != nil {
		t.Fatal(err)
	}
	if d.staleness != 1500*time.Millisecond || d.queueLim != 6.25 {
		t.Errorf("reloaded detector = %+v", *d)
	}
}
