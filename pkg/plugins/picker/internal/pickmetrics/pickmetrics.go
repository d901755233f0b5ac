// Package pickmetrics holds what the strategy pickers that own metrics
// share: registration that reuses a collector already registered (another
// instance, a configuration reload), and backend label values capped per
// metric so that endpoint names, which come from discovery, keep the label
// set closed.
//
// It is not a plugin and registers nothing itself. Being internal, only
// the picker plugins under pkg/plugins/picker may import it.
package pickmetrics

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Label bounds of backend values.
const (
	// MaxBackendLabelValues caps the distinct backend values of one metric
	// (across every instance registered on the same registry): the first
	// ones seen keep their own series, later ones are recorded under
	// OverflowLabelValue.
	MaxBackendLabelValues = 256
	// MaxLabelValueBytes is the longest backend value recorded; longer
	// names are cut at a UTF-8 boundary.
	MaxLabelValueBytes = 256
	// OverflowLabelValue replaces backend names beyond the cap (the word
	// pkg/metrics and llm-d router use).
	OverflowLabelValue = "other"
)

// RegisterOrReuse registers c on reg, or returns the collector already
// registered there under the same description when it has c's type.
func RegisterOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// Limiter admits at most a fixed number of distinct label values. It is
// lock-free; under a race the cap may be exceeded by the number of
// concurrent first sightings, which bounds growth all the same.
type Limiter struct {
	seen sync.Map // value -> canonical (cloned, sanitized) string
	n    atomic.Int64
	max  int64
}

// NewLimiter returns a limiter admitting max values.
func NewLimiter(max int) *Limiter { return &Limiter{max: int64(max)} }

// Bound returns the label value to record for v: v itself (a canonical
// copy) while the cap lasts or once admitted, OverflowLabelValue after.
// A value, once admitted, always maps to itself.
func (l *Limiter) Bound(v string) string {
	if c, ok := l.seen.Load(v); ok {
		return c.(string)
	}
	s := sanitize(v)
	if c, ok := l.seen.Load(s); ok {
		return c.(string)
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

// sanitize makes v a valid, bounded label value.
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

// CounterVec is a counter vector with a backend label whose values its
// Backends limiter caps. Registered as itself, so every instance that
// registers the same description on a registry shares one vector and one
// cap.
type CounterVec struct {
	*prometheus.CounterVec
	// Backends caps the backend label's values.
	Backends *Limiter
}

// NewCounterVec registers a counter vector with a capped backend label on
// reg, or returns the one registered there already.
func NewCounterVec(reg prometheus.Registerer, opts prometheus.CounterOpts, labels []string) (*CounterVec, error) {
	return RegisterOrReuse(reg, &CounterVec{CounterVec: prometheus.NewCounterVec(opts, labels), Backends: NewLimiter(MaxBackendLabelValues)})
}

// GaugeVec is CounterVec for gauges.
type GaugeVec struct {
	*prometheus.GaugeVec
	// Backends caps the backend label's values.
	Backends *Limiter
}

// NewGaugeVec registers a gauge vector with a capped backend label on reg,
// or returns the one registered there already.
func NewGaugeVec(reg prometheus.Registerer, opts prometheus.GaugeOpts, labels []string) (*GaugeVec, error) {
	return RegisterOrReuse(reg, &GaugeVec{GaugeVec: prometheus.NewGaugeVec(opts, labels), Backends: NewLimiter(MaxBackendLabelValues)})
}

// Children caches the series of one instance by endpoint name, so a pick
// whose endpoint was seen before takes no lock and allocates nothing. The
// resolve function makes the series of a (capped) backend value.
type Children[T any] struct {
	m       sync.Map // endpoint name -> T
	n       atomic.Int64
	resolve func(backend string) T
	limiter *Limiter
}

// NewChildren returns a cache resolving series with resolve, backend
// values capped by limiter.
func NewChildren[T any](limiter *Limiter, resolve func(backend string) T) *Children[T] {
	return &Children[T]{resolve: resolve, limiter: limiter}
}

// maxCachedNames bounds the names a Children remembers: beyond it, names
// are resolved on every call (still under the label cap).
const maxCachedNames = 4 * MaxBackendLabelValues

// Get returns the series of the endpoint named name.
func (c *Children[T]) Get(name string) T {
	if v, ok := c.m.Load(name); ok {
		return v.(T)
	}
	v := c.resolve(c.limiter.Bound(name))
	if c.n.Load() < maxCachedNames {
		if _, loaded := c.m.LoadOrStore(strings.Clone(name), v); !loaded {
			c.n.Add(1)
		}
	}
	return v
}

var (
	_ prometheus.Collector = (*CounterVec)(nil)
	_ prometheus.Collector = (*GaugeVec)(nil)
)
