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

// limiter admits at most max distinct label values. It is lock-free: the
// admitted set is a sync.Map whose value is the canonical (cloned,
// sanitized) string, so a caller's buffer is never retained. Under a race
// the cap may be exceeded by the number of concurrent first sightings, which
// is harmless: the cap bounds growth, it does not ration.
type limiter struct {
	seen sync.Map // raw or sanitized value -> canonical string
	n    atomic.Int64
	max  int64
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
	s := sanitize(v)
	if s != v {
		if c, ok := l.seen.Load(s); ok {
			return c.(string)
		}
	}
	if l.n.Load() >= l.max {
		return OverflowLabelValue
	}
	s = strings.Clone(s)
	c, loaded := l.seen.LoadOrStore(s, s)
	if !loaded {
		l.n.Add(1)
	}
	return c.(string)
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
