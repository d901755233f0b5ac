package loadgen

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds from 1 µs to 60 s (or the bound
// given to NewHistogramUpTo) with three significant digits: every
// percentile is within 0.1 % of the true value.
const (
	histMin    = 1
	histMax    = 60_000_000
	histDigits = 3
)

// Histogram is a latency recorder. Not safe for concurrent use: give each
// worker its own and Merge them.
type Histogram struct {
	h   *hdrhistogram.Histogram
	max int64 // µs
}

// NewHistogram returns an empty recorder of latencies up to 60 s.
func NewHistogram() *Histogram { return NewHistogramUpTo(histMax * time.Microsecond) }

// NewHistogramUpTo returns an empty recorder of latencies up to bound (at
// least 1 ms), for runs whose requests may last longer than 60 s.
func NewHistogramUpTo(bound time.Duration) *Histogram {
	us := max(bound.Microseconds(), 1000)
	return &Histogram{h: hdrhistogram.New(histMin, us, histDigits), max: us}
}

// Record adds one latency; values beyond the range are clamped to it.
func (h *Histogram) Record(d time.Duration) {
	us := min(max(d.Microseconds(), histMin), h.max)
	_ = h.h.RecordValue(us) // cannot fail inside the range
}

// Merge adds every value of o, which must have the same bound as h (a
// value above h's would be dropped).
func (h *Histogram) Merge(o *Histogram) { h.h.Merge(o.h) }

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Quantile returns the q-th percentile (0 < q ≤ 100).
func (h *Histogram) Quantile(q float64) time.Duration {
	return time.Duration(h.h.ValueAtQuantile(q)) * time.Microsecond
}

// Max returns the largest value recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.h.Max()) * time.Microsecond }

// Summary is the percentiles a report shows.
type Summary struct {
	Count              int64
	P50, P90, P99, Max time.Duration
}

// Summary returns the histogram's percentiles.
func (h *Histogram) Summary() Summary {
	return Summary{Count: h.Count(), P50: h.Quantile(50), P90: h.Quantile(90), P99: h.Quantile(99), Max: h.Max()}
}
