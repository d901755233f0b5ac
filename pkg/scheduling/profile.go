package scheduling

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// ErrNoEndpoints means nothing was left to route to: no candidates, a
// filter removed them all, or every profile failed.
var ErrNoEndpoints = errors.New("no endpoints available for the request")

// WeightedScorer is a scorer with its profile weight.
type WeightedScorer struct {
	Scorer Scorer
	Weight float64
}

// Profile is one scheduling profile: filters, weighted scorers, a picker.
// It is immutable and safe for concurrent use.
type Profile struct {
	name    string
	filters []Filter
	scorers []WeightedScorer
	picker  Picker
	// info is what a ProfilePicker is told (nil picker-side when the
	// picker is a plain Picker).
	info    PickInfo
	ppicker ProfilePicker

	filterObs []prometheus.Observer
	scorerObs []prometheus.Observer
	pickerObs prometheus.Observer
}

// NewProfile builds a profile. A picker is required; m may be nil.
func NewProfile(name string, filters []Filter, scorers []WeightedScorer, picker Picker, m *FrameworkMetrics) (*Profile, error) {
	if picker == nil {
		return nil, fmt.Errorf("profile %q: no picker", name)
	}
	p := &Profile{name: name, filters: filters, scorers: scorers, picker: picker, pickerObs: m.observer(PointPicker, picker)}
	for _, f := range filters {
		p.filterObs = append(p.filterObs, m.observer(PointFilter, f))
	}
	for _, s := range scorers {
		if !(s.Weight >= 0) || math.IsInf(s.Weight, 1) {
			return nil, fmt.Errorf("profile %q: scorer %s: weight must be a finite number >= 0, got %v", name, s.Scorer.TypedName(), s.Weight)
		}
		p.scorerObs = append(p.scorerObs, m.observer(PointScorer, s.Scorer))
		p.info.TotalWeight += s.Weight
	}
	p.info.Profile, p.info.Scorers = name, len(scorers)
	p.ppicker, _ = picker.(ProfilePicker)
	return p, nil
}

// Name returns the profile's name.
func (p *Profile) Name() string { return p.name }

// Filters returns the profile's filters in order.
func (p *Profile) Filters() []Filter { return p.filters }

// Scorers returns the profile's weighted scorers.
func (p *Profile) Scorers() []WeightedScorer { return p.scorers }

// Picker returns the profile's picker.
func (p *Profile) Picker() Picker { return p.picker }

// runBuffers are the per-run scratch slices, pooled so a run allocates
// little.
type runBuffers struct {
	scores []float64
	scored []ScoredEndpoint
}

var bufPool = sync.Pool{New: func() any { return &runBuffers{} }}

// Run filters, scores and picks among candidates. It returns an error
// wrapping ErrNoEndpoints when nothing is left to pick from.
func (p *Profile) Run(ctx context.Context, req *Request, candidates []*Endpoint) (*ProfileResult, error) {
	buf := bufPool.Get().(*runBuffers)
	defer bufPool.Put(buf)
	ctx, span := startProfile(ctx, p.name, len(candidates))
	defer span.End()
	// A request for strict dominance (C-37) is a scorer's word to this
	// profile's picker only: one left by an earlier profile whose picker
	// does not read it (max-score) must not reach this one's. Likewise
	// the record of who decided is this run's picker's: a picker that
	// records nothing leaves it "not recorded", not an earlier pass's.
	if req != nil {
		StrictDominanceKey.Delete(req)
		DecidedByKey.Delete(req)
	}
	x := req.explanation()
	if x != nil {
		x.begin(p, req, len(candidates))
	}
	scored, err := p.score(ctx, req, candidates, buf, x)
	if err != nil {
		if x != nil {
			x.failed(err)
		}
		spanFailed(span, err)
		return nil, err
	}
	start := time.Now()
	pctx, pspan := pluginSpan(span.IsRecording(), ctx, PointPicker, p.picker)
	var res *ProfileResult
	if p.ppicker != nil {
		res = p.ppicker.PickInProfile(pctx, req, scored, p.info)
	} else {
		res = p.picker.Pick(pctx, req, scored)
	}
	pspan.End()
	p.pickerObs.Observe(time.Since(start).Seconds())
	if x != nil {
		x.picked(p, req, res)
	}
	clear(scored) // drop endpoint references held by the pool
	if res == nil || len(res.Targets) == 0 {
		err := fmt.Errorf("profile %q: picker %s chose nothing: %w", p.name, p.picker.TypedName(), ErrNoEndpoints)
		spanFailed(span, err)
		return nil, err
	}
	spanChose(span, res.Targets)
	return res, nil
}

// Scores runs the filters and scorers without picking and returns every
// remaining endpoint with its weighted total, in filter order. It explains
// a decision (debug endpoints, tests); the request path uses Run.
func (p *Profile) Scores(ctx context.Context, req *Request, candidates []*Endpoint) ([]ScoredEndpoint, error) {
	buf := &runBuffers{}
	scored, err := p.score(ctx, req, candidates, buf, nil)
	if err != nil {
		return nil, err
	}
	return append([]ScoredEndpoint(nil), scored...), nil
}

// score filters and scores into buf and returns the scored slice; x, when
// not nil, records each step.
func (p *Profile) score(ctx context.Context, req *Request, candidates []*Endpoint, buf *runBuffers, x *Explanation) ([]ScoredEndpoint, error) {
	eps := candidates
	if len(eps) == 0 {
		return nil, fmt.Errorf("profile %q: %w", p.name, ErrNoEndpoints)
	}
	traced := tracing.Recording(ctx)
	for i, f := range p.filters {
		start := time.Now()
		fctx, span := pluginSpan(traced, ctx, PointFilter, f)
		eps = f.Filter(fctx, req, eps)
		endFilter(span, len(eps))
		p.filterObs[i].Observe(time.Since(start).Seconds())
		if x != nil {
			x.filtered(f, eps)
		}
		if len(eps) == 0 {
			return nil, fmt.Errorf("profile %q: filter %s left no endpoints: %w", p.name, f.TypedName(), ErrNoEndpoints)
		}
	}
	n := len(eps)
	if cap(buf.scored) < n {
		buf.scored = make([]ScoredEndpoint, n)
		buf.scores = make([]float64, n)
	}
	scored := buf.scored[:n]
	scores := buf.scores[:n]
	for i, e := range eps {
		scored[i] = ScoredEndpoint{Endpoint: e}
	}
	if x != nil {
		x.startScoring(p, eps)
	}
	for i, ws := range p.scorers {
		clear(scores)
		start := time.Now()
		sctx, span := pluginSpan(traced, ctx, PointScorer, ws.Scorer)
		ws.Scorer.Score(sctx, req, eps, scores)
		span.End()
		p.scorerObs[i].Observe(time.Since(start).Seconds())
		if x != nil {
			x.scoredBy(i, scores)
		}
		for j, s := range scores {
			// NaN fails both comparisons and counts as 0.
			if !(s > 0) {
				continue
			}
			if s > 1 {
				s = 1
			}
			scored[j].Score += s * ws.Weight
		}
	}
	if x != nil {
		x.scoredAll(scored)
	}
	return scored, nil
}
