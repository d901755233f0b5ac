package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Label bounds. Model names come from request bodies and endpoint names
// from discovery, so neither is a closed set; Prometheus vectors never
// forget a label combination, so each request-derived label is capped. The
// first values seen keep their own series; later ones are recorded under
// OverflowLabelValue. A value, once admitted, always maps to itself, so
// paired calls (RunningRequests +1/-1) stay balanced.
const (
	// MaxModelLabelValues caps the distinct model_name/target_model_name
	// values (the same cap as llm-d router).
	MaxModelLabelValues = 1000
	// MaxEndpointLabelValues caps the distinct pod_name values of
	// inference_extension_scheduler_attempts_total (pods restart under new
	// names).
	MaxEndpointLabelValues = 1000
	// MaxNamespaceLabelValues caps the distinct namespace values.
	MaxNamespaceLabelValues = 64
	// MaxErrorCodes caps the distinct error_code values.
	MaxErrorCodes = 32
	// MaxRefusalReasons caps the distinct reason values of
	// switchyard_request_refusals_total.
	MaxRefusalReasons = 64
	// MaxLabelValueBytes is the longest label value recorded; longer values
	// are cut at a UTF-8 boundary.
	MaxLabelValueBytes = 256
	// OverflowLabelValue replaces values beyond a cap (llm-d router uses the
	// same word).
	OverflowLabelValue = "other"
)

// limiter admits at most max distinct label values. Lookups are lock-free:
// the admitted set is a sync.Map whose value is the canonical (cloned,
// sanitized) string, so a caller's buffer is never retained. Admission
// (the first sighting of a value while the cap is not spent) takes mu, so
// the cap is exact and a value's label is fixed at its first sighting:
// once the cap is spent nothing more is admitted, and a value admitted
// concurrently with a caller's look at the cap is found by its second
// look (a value is stored before n counts it). Denied values are not
// stored and take no lock.
type limiter struct {
	seen sync.Map // sanitized value -> canonical string
	n    atomic.Int64
	max  int64
	mu   sync.Mutex
	// afterMiss, when set (tests only), runs after a first lookup misses.
	afterMiss func()
}

func newLimiter(max int) *limiter { return &limiter{max: int64(max)} }

// bound returns the label value to record for v: v itself (canonical copy)
// when admitted, OverflowLabelValue when the cap is spent. The empty string
// is always admitted and does not count.
func (l *limiter) bound(v string) string {
	if v == "" {
		return ""
	}
	if c, ok := l.seen.Load(v); ok {
		return c.(string)
	}
	if l.afterMiss != nil {
		l.afterMiss()
	}
	s := sanitize(v)
	if l.n.Load() >= l.max {
		// Spent: v is admitted only if it was stored before the count
		// that spent the cap, and then this look finds it.
		if c, ok := l.seen.Load(s); ok {
			return c.(string)
		}
		return OverflowLabelValue
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.seen.Load(s); ok {
		return c.(string)
	}
	if l.n.Load() >= l.max {
		return OverflowLabelValue
	}
	s = strings.Clone(s)
	l.seen.Store(s, s)
	l.n.Add(1)
	return s
}

// sanitize makes v a valid Prometheus label value: invalid UTF-8 is
// replaced (client_golang panics on it) and the length is capped.
func sanitize(v string) string {
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	if len(v) > MaxLabelValueBytes {
		i := MaxLabelValueBytes
		for i > 0 && !utf8.RuneStart(v[i]) {
			i--
		}
		v = v[:i]
	}
	return v
}
