// Package pick holds what the in-tree pickers share: the maxNumOfEndpoints
// parameter, top-k selection with uniformly random tie-breaking, rotation
// (a lock-free turn counter, and orders that rotate the whole list or the
// ties of an ascending order, for strategies that own their tie-break),
// and a one-allocation single-target result.
//
// It is not a plugin and registers nothing. Being internal, only the picker
// plugins under pkg/plugins/picker may import it; plugins of other kinds and
// out-of-tree code cannot.
package pick

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Params configures how many endpoints a picker returns. Pickers expose it
// under their own name (type Params = pick.Params).
type Params struct {
	// MaxNumOfEndpoints is how many distinct endpoints the picker returns:
	// the primary target first, then fallbacks, in the picker's order.
	// Fewer are returned when fewer endpoints are left. At least 1;
	// default 1.
	MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
}

// DefaultParams returns the default parameters: one endpoint.
func DefaultParams() Params { return Params{MaxNumOfEndpoints: 1} }

// Validate reports every invalid parameter, each prefixed by its field path.
func (p *Params) Validate() error {
	var errs []error
	if p.MaxNumOfEndpoints < 1 {
		errs = append(errs, fmt.Errorf("maxNumOfEndpoints: must be >= 1, got %d", p.MaxNumOfEndpoints))
	}
	return errors.Join(errs...)
}

// Single returns a result whose only target is e, in one allocation.
func Single(e *scheduling.Endpoint) *scheduling.ProfileResult {
	o := &oneTarget{targets: [1]*scheduling.Endpoint{e}}
	o.res.Targets = o.targets[:]
	return &o.res
}

// oneTarget holds a result and its single target in one allocation.
type oneTarget struct {
	res     scheduling.ProfileResult
	targets [1]*scheduling.Endpoint
}

// Result returns a result targeting the endpoints of s, in order.
func Result(s []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	targets := make([]*scheduling.Endpoint, len(s))
	for i := range s {
		targets[i] = s[i].Endpoint
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// Rank is the order SelectTop sorts by: the score itself, except that NaN
// ranks as -Inf, below every other score (and tied with -Inf).
func Rank(s float64) float64 {
	if s != s { // NaN
		return math.Inf(-1)
	}
	return s
}

// SelectTop reorders s so that s[:k] holds the k highest-ranked entries
// (see Rank) in descending order, entries of equal rank in uniformly random
// order: the distribution of "shuffle, stable sort descending, take k". It
// runs in expected O(len(s) + k log k) time and allocates nothing.
// 1 <= k <= len(s).
func SelectTop(rng *rand.Rand, s []scheduling.ScoredEndpoint, k int) {
	n := len(s)
	if k < n {
		partitionTop(rng, s, k)
	}
	// t is the k-th highest rank. Every entry ranked above t is in s[:k];
	// entries ranked t may be on both sides of k.
	t := Rank(s[0].Score)
	for i := 1; i < k; i++ {
		t = min(t, Rank(s[i].Score))
	}
	above := 0
	for i := range k {
		if Rank(s[i].Score) > t {
			s[i], s[above] = s[above], s[i]
			above++
		}
	}
	tied := k
	for i := k; i < n; i++ {
		if Rank(s[i].Score) == t {
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
			ra, rb := Rank(a.Score), Rank(b.Score)
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
		pivot := Rank(s[lo+rng.IntN(hi-lo)].Score)
		// After the loop: s[lo:lt] > pivot, s[lt:gt] == pivot, s[gt:hi] < pivot.
		lt, i, gt := lo, lo, hi
		for i < gt {
			r := Rank(s[i].Score)
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

// Base is what every picker holds: its name, how many endpoints it returns
// and its random source. Pickers embed it.
type Base struct {
	typedName scheduling.TypedName
	// Max is the number of endpoints to return (maxNumOfEndpoints).
	Max int
	// Rng is the picker's random source, safe for concurrent use.
	Rng *rand.Rand
}

// MaxEndpoints is the number of endpoints the picker returns at most.
func (b *Base) MaxEndpoints() int { return b.Max }

// NewBase validates p and returns the Base of a picker of the given type;
// an empty name defaults to the type, and randomness comes from
// h.Rand(name).
func NewBase(pluginType, name string, p Params, h scheduling.Handle) (Base, error) {
	if err := p.Validate(); err != nil {
		return Base{}, err
	}
	if h == nil {
		return Base{}, fmt.Errorf("%s: nil handle", pluginType)
	}
	if name == "" {
		name = pluginType
	}
	return Base{
		typedName: scheduling.TypedName{Type: pluginType, Name: name},
		Max:       p.MaxNumOfEndpoints,
		Rng:       h.Rand(name),
	}, nil
}

// TypedName implements scheduling.Plugin.
func (b *Base) TypedName() scheduling.TypedName { return b.typedName }
