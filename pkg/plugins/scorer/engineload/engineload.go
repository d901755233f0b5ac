package engineload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	pickel "github.com/switchyard-ai/switchyard/pkg/plugins/picker/engineload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/prefix"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "engine-load-scorer"

// Defaults (C-33, C-34; the deadband and freshness are the
// engine-load-picker's).
const (
	DefaultEngineLoadWeight      = 0.3
	DefaultMinOverlapThreshold   = 0.1
	DefaultBalanceAbsThreshold   = pickel.DefaultBalanceAbsThreshold
	DefaultBalanceRelThreshold   = pickel.DefaultBalanceRelThreshold
	DefaultMaxStalenessIntervals = pickel.DefaultMaxStalenessIntervals
	// DefaultTotalSlotsLabel is the endpoint label that declares a model
	// server's total slots (vLLM's max_num_seqs, llama.cpp's --parallel):
	// neither vLLM nor modelsim exports it as a metric.
	DefaultTotalSlotsLabel = "switchyard.ai/total-slots"
)

// Params configures an engine-load-scorer.
type Params struct {
	// EngineLoadWeight caps the term: the score is at most this. In
	// [0, 1]; default 0.3.
	EngineLoadWeight float64 `json:"engineLoadWeight"`
	// MinOverlapThreshold is the fraction of the prompt's prefix blocks
	// an endpoint must hold to take part. In (0, 1]; default 0.1.
	MinOverlapThreshold float64 `json:"minOverlapThreshold"`
	// BalanceAbsThreshold: the deadband opens only when the largest and
	// smallest waiting queues differ by more than this. >= 0; default 64.
	BalanceAbsThreshold int `json:"balanceAbsThreshold"`
	// BalanceRelThreshold: the deadband opens only when the largest
	// waiting queue is more than this times the smallest. >= 1; default
	// 1.5.
	BalanceRelThreshold float64 `json:"balanceRelThreshold"`
	// MaxStalenessIntervals: metrics older than this many scrape
	// intervals are stale. 1..1000; default 3.
	MaxStalenessIntervals int `json:"maxStalenessIntervals"`
	// ScrapeInterval is the metrics scrape interval, a Go duration.
	// Empty (the default) means the EPP's own (--refresh-metrics-interval)
	// or, without one, 50ms.
	ScrapeInterval string `json:"scrapeInterval,omitempty"`
	// TotalSlotsLabel is the endpoint label that declares its total slots
	// (a positive integer). Default "switchyard.ai/total-slots".
	TotalSlotsLabel string `json:"totalSlotsLabel"`
}

// DefaultParams returns the defaults.
func DefaultParams() Params {
	return Params{
		EngineLoadWeight:      DefaultEngineLoadWeight,
		MinOverlapThreshold:   DefaultMinOverlapThreshold,
		BalanceAbsThreshold:   DefaultBalanceAbsThreshold,
		BalanceRelThreshold:   DefaultBalanceRelThreshold,
		MaxStalenessIntervals: DefaultMaxStalenessIntervals,
		TotalSlotsLabel:       DefaultTotalSlotsLabel,
	}
}

// Validate reports every invalid parameter, each prefixed by its field
// path.
func (p *Params) Validate() error {
	var errs []error
	if !(p.EngineLoadWeight >= 0 && p.EngineLoadWeight <= 1) {
		errs = append(errs, fmt.Errorf("engineLoadWeight: must be in [0, 1], got %v", p.EngineLoadWeight))
	}
	if !(p.MinOverlapThreshold > 0 && p.MinOverlapThreshold <= 1) {
		errs = append(errs, fmt.Errorf("minOverlapThreshold: must be in (0, 1], got %v", p.MinOverlapThreshold))
	}
	if p.BalanceAbsThreshold < 0 {
		errs = append(errs, fmt.Errorf("balanceAbsThreshold: must be >= 0, got %d", p.BalanceAbsThreshold))
	}
	if !(p.BalanceRelThreshold >= 1) || math.IsInf(p.BalanceRelThreshold, 1) {
		errs = append(errs, fmt.Errorf("balanceRelThreshold: must be a finite number >= 1, got %v", p.BalanceRelThreshold))
	}
	if p.MaxStalenessIntervals < 1 || p.MaxStalenessIntervals > pickel.MaxStalenessIntervalsLimit {
		errs = append(errs, fmt.Errorf("maxStalenessIntervals: must be 1..%d, got %d", pickel.MaxStalenessIntervalsLimit, p.MaxStalenessIntervals))
	}
	if p.ScrapeInterval != "" {
		d, err := time.ParseDuration(strings.TrimSpace(p.ScrapeInterval))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("scrapeInterval: invalid duration %q: use a Go duration such as \"50ms\" or \"1s\"", p.ScrapeInterval))
		case d <= 0:
			errs = append(errs, fmt.Errorf("scrapeInterval: must be > 0, got %q", p.ScrapeInterval))
		}
	}
	if strings.TrimSpace(p.TotalSlotsLabel) == "" {
		errs = append(errs, errors.New("totalSlotsLabel: must not be empty"))
	}
	return errors.Join(errs...)
}

// Scorer is an engine-load-scorer instance. It keeps no per-request state
// and is safe for concurrent use.
type Scorer struct {
	typedName scheduling.TypedName
	params    Params
	horizon   time.Duration
	now       func() time.Time
}

// New returns an engine-load-scorer.
func New(name string, p Params, h scheduling.Handle) (*Scorer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	interval := pickel.DefaultScrapeInterval
	if p.ScrapeInterval != "" {
		interval, _ = time.ParseDuration(strings.TrimSpace(p.ScrapeInterval))
	} else if h != nil {
		if host := scheduling.ScrapeIntervalOf(h); host > 0 {
			interval = host
		}
	}
	return &Scorer{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		params:    p,
		horizon:   interval * time.Duration(p.MaxStalenessIntervals),
		now:       time.Now,
	}, nil
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer: the term trades the prefix
// affinity it builds on against load.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Balance }

// Consumes implements scheduling.DataConsumer: the prefix producer's
// match.
func (s *Scorer) Consumes() []string { return []string{scheduling.PrefixMatchKey.Name()} }

// DefaultProducer implements scheduling.DefaultProducer: without a
// configured producer of the prefix match, the loader creates an
// approx-prefix-cache-producer with its defaults (no parameters, so a
// prefix-cache-scorer's parameters win when both are configured).
func (s *Scorer) DefaultProducer(key string) (string, []byte, bool) {
	if key != scheduling.PrefixMatchKey.Name() {
		return "", nil, false
	}
	return prefix.ProducerType, nil, true
}

// EffectiveParams returns the parameters in use.
func (s *Scorer) EffectiveParams() any { return s.params }

// Horizon returns how old metrics may be and still count.
func (s *Scorer) Horizon() time.Duration { return s.horizon }

// Slots returns the total slots an endpoint declares with label, 0 when
// it declares none (absent, not a positive integer).
func Slots(e *scheduling.Endpoint, label string) int {
	v, ok := e.Metadata().Labels[label]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// excluded marks, in the scores slice during Score, a candidate that does
// not take part.
const excluded = -1

// Score implements scheduling.Scorer.
func (s *Scorer) Score(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	if s.params.EngineLoadWeight == 0 || !prefix.MatchRatios(req, endpoints, scores) {
		clear(scores)
		return
	}
	now := s.now()
	label := s.params.TotalSlotsLabel
	minW, maxW, n := math.MaxInt, math.MinInt, 0
	allSlots := true
	for i, e := range endpoints {
		if scores[i] < s.params.MinOverlapThreshold || !pickel.Fresh(e.Metrics().UpdateTime, now, s.horizon) {
			scores[i] = excluded
			continue
		}
		n++
		w := pickel.Waiting(e)
		minW, maxW = min(minW, w), max(maxW, w)
		// The match ratio is no longer needed: keep the slots instead, so
		// the label is parsed once.
		scores[i] = 0
		if allSlots {
			if slots := Slots(e, label); slots > 0 {
				scores[i] = float64(slots)
			} else {
				allSlots = false
			}
		}
	}
	if n == 0 || !pickel.DeadbandOpen(minW, maxW, s.params.BalanceAbsThreshold, s.params.BalanceRelThreshold) {
		clear(scores)
		return
	}
	weight := s.params.EngineLoadWeight
	for i, e := range endpoints {
		if scores[i] == excluded {
			scores[i] = 0
			continue
		}
		w := float64(pickel.Waiting(e))
		var q float64
		if allSlots {
			q = min(w/scores[i], 1)
		} else {
			q = w / float64(maxW) // maxW > minW >= 0 with the deadband open
		}
		scores[i] = weight * (1 - (0.5*q + 0.5*pickel.KVUsage(e)))
	}
}

// Registration registers the engine-load-scorer.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Scorer          = (*Scorer)(nil)
	_ scheduling.DataConsumer    = (*Scorer)(nil)
	_ scheduling.DefaultProducer = (*Scorer)(nil)
)
