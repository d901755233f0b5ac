// Package maxscore provides the max-score-picker: it returns the endpoints
// with the highest total score, highest first, breaking ties uniformly at
// random.
//
// GIE v1.5 shuffles the scored endpoints and then stable-sorts them by score;
// this picker returns the same distribution of results without sorting: one
// pass with reservoir sampling over the tied best when one endpoint is
// wanted, and an expected linear-time partial selection when more are.
package maxscore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "max-score-picker"

// Params configures a max-score-picker.
type Params struct {
	// MaxNumOfEndpoints is how many endpoints the picker returns: the
	// primary target first, then fallbacks, in descending score order.
	// Fewer are returned when fewer endpoints are left. At least 1;
	// default 1.
	MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
}

// DefaultParams returns the default parameters.
func DefaultParams() Params { return Params{MaxNumOfEndpoints: 1} }

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if p.MaxNumOfEndpoints < 1 {
		errs = append(errs, fmt.Errorf("maxNumOfEndpoints: must be >= 1, got %d", p.MaxNumOfEndpoints))
	}
	return errors.Join(errs...)
}

// Picker is a max-score-picker instance. It is safe for concurrent use.
type Picker struct {
	typedName scheduling.TypedName
	max       int
	rng       *rand.Rand
}

// New returns a max-score-picker. Its randomness comes from h.Rand(name).
func New(name string, p Params, h scheduling.Handle) (*Picker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("max-score-picker: nil handle")
	}
	if name == "" {
		name = Type
	}
	return &Picker{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		max:       p.MaxNumOfEndpoints,
		rng:       h.Rand(name),
	}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Picker) TypedName() scheduling.TypedName { return p.typedName }

// Pick implements scheduling.Picker. It returns up to MaxNumOfEndpoints
// endpoints in descending score order; endpoints with equal scores come in
// a uniformly random order. A NaN score ranks below every other score.
// Pick may reorder scored.
func (p *Picker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	switch {
	case len(scored) == 0:
		return &scheduling.ProfileResult{}
	case p.max == 1:
		return singleResult(scored[p.pickOne(scored)].Endpoint)
	}
	k := min(p.max, len(scored))
	selectTop(p.rng, scored, k)
	targets := make([]*scheduling.Endpoint, k)
	for i := range targets {
		targets[i] = scored[i].Endpoint
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// pickOne returns the index of a best-scored endpoint, chosen uniformly
// among the tied best by reservoir sampling: the c-th tie seen replaces the
// current choice with probability 1/c. Randomness is drawn only on ties.
func (p *Picker) pickOne(scored []scheduling.ScoredEndpoint) int {
	best, bestRank, ties := 0, rank(scored[0].Score), 1
	for i := 1; i < len(scored); i++ {
		r := rank(scored[i].Score)
		switch {
		case r > bestRank:
			best, bestRank, ties = i, r, 1
		case r == bestRank:
			ties++
			if p.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// rank orders scores: a NaN score ranks as -Inf, the lowest rank.
func rank(s float64) float64 {
	if s != s { // NaN
		return math.Inf(-1)
	}
	return s
}

// selectTop reorders s so that s[:k] holds the k highest-ranked entries in
// descending order, entries of equal rank in uniformly random order; this is
// the distribution of "shuffle, stable sort descending, take k". It runs in
// expected O(len(s) + k log k) time and allocates nothing. 1 <= k <= len(s).
func selectTop(rng *rand.Rand, s []scheduling.ScoredEndpoint, k int) {
	n := len(s)
	if k < n {
		partitionTop(rng, s, k)
	}
	// t is the k-th highest rank. Every entry ranked above t is in s[:k];
	// entries ranked t may be on both sides of k.
	t := rank(s[0].Score)
	for i := 1; i < k; i++ {
		t = min(t, rank(s[i].Score))
	}
	above := 0
	for i := range k {
		if rank(s[i].Score) > t {
			s[i], s[above] = s[above], s[i]
			above++
		}
	}
	tied := k
	for i := k; i < n; i++ {
		if rank(s[i].Score) == t {
			s[i], s[tied] = s[tied], s[i]
			tied++
		}
	}
	// s[above:tied] all rank t: a partial Fisher-Yates shuffle draws a
	// uniformly random ordered sample of k-above of them into s[above:k].
	for i := above; i < k; i++ {
		j := i + rng.IntN(tied-i)
		s[i], s[j] = s[j], s[i]
	}
	// s[:above] holds whole groups of ties: shuffle, then sort stably.
	if above > 1 {
		for i := above - 1; i > 0; i-- {
			j := rng.IntN(i + 1)
			s[i], s[j] = s[j], s[i]
		}
		slices.SortStableFunc(s[:above], func(a, b scheduling.ScoredEndpoint) int {
			ra, rb := rank(a.Score), rank(b.Score)
			switch {
			case ra > rb:
				return -1
			case ra < rb:
				return 1
			}
			return 0
		})
	}
}

// partitionTop reorders s so that s[:k] holds k entries ranked at least as
// high as every entry of s[k:] (quickselect with random pivots and a
// three-way partition, so many equal scores cost one pass). 0 < k < len(s).
func partitionTop(rng *rand.Rand, s []scheduling.ScoredEndpoint, k int) {
	lo, hi := 0, len(s)
	for hi-lo > 1 {
		pivot := rank(s[lo+rng.IntN(hi-lo)].Score)
		// After the loop: s[lo:lt] > pivot, s[lt:gt] == pivot, s[gt:hi] < pivot.
		lt, i, gt := lo, lo, hi
		for i < gt {
			r := rank(s[i].Score)
			switch {
			case r > pivot:
				s[lt], s[i] = s[i], s[lt]
				lt++
				i++
			case r < pivot:
				gt--
				s[gt], s[i] = s[i], s[gt]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k <= gt:
			return
		default:
			lo = gt
		}
	}
}

// oneTarget holds a result and its single target in one allocation.
type oneTarget struct {
	res     scheduling.ProfileResult
	targets [1]*scheduling.Endpoint
}

func singleResult(e *scheduling.Endpoint) *scheduling.ProfileResult {
	o := &oneTarget{targets: [1]*scheduling.Endpoint{e}}
	o.res.Targets = o.targets[:]
	return &o.res
}

// Registration registers the max-score-picker.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Picker = (*Picker)(nil)
