package pick

import (
	"math"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Rotation is a picker's rotation counter: each call of Next returns the
// next turn. Safe for concurrent use, without a lock.
type Rotation struct{ n atomic.Uint64 }

// Next returns this request's turn: 0, 1, 2, ...
func (r *Rotation) Next() uint64 { return r.n.Add(1) - 1 }

// Turn returns this request's turn, as Next, unless info says the call
// only orders fallbacks: then the turn the next pick will take, without
// advancing the rotation.
func (r *Rotation) Turn(info scheduling.PickInfo) uint64 {
	if info.FallbacksOnly {
		return r.n.Load()
	}
	return r.Next()
}

// Rotated returns min(k, len(scored)) targets in rotation: scored[c mod n]
// first, then the endpoints after it in input order, wrapping around.
// Successive turns c walk the list in order. An empty scored gives an
// empty result. 1 <= k.
func Rotated(scored []scheduling.ScoredEndpoint, c uint64, k int) *scheduling.ProfileResult {
	n := len(scored)
	if n == 0 {
		return &scheduling.ProfileResult{}
	}
	start := int(c % uint64(n))
	if k == 1 {
		return Single(scored[start].Endpoint)
	}
	k = min(k, n)
	targets := make([]*scheduling.Endpoint, k)
	for i := range targets {
		targets[i] = scored[(start+i)%n].Endpoint
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// Taken is the one key value callers of AscendingRotated may not use: it
// marks the entries already chosen.
const Taken = math.MaxUint64

// AscendingRotated returns min(k, len(scored)) targets in ascending order
// of their keys (keys[i] is scored[i]'s, < Taken), rotating among equal
// keys: of the t endpoints tied at a key, the (c mod t)-th in input order
// comes first, then the ties after it, wrapping around. So successive
// turns c share ties evenly, whatever their positions in the list. It
// overwrites keys; k == 1 costs two passes and one allocation.
func AscendingRotated(scored []scheduling.ScoredEndpoint, keys []uint64, c uint64, k int) *scheduling.ProfileResult {
	n := len(scored)
	if n == 0 {
		return &scheduling.ProfileResult{}
	}
	keys = keys[:n]
	if k == 1 {
		best, ties := minTies(keys)
		return Single(scored[nthTie(keys, best, int(c%uint64(ties)))].Endpoint)
	}
	k = min(k, n)
	targets := make([]*scheduling.Endpoint, 0, k)
	for len(targets) < k {
		best, ties := minTies(keys)
		first := int(c % uint64(ties))
		// The ties from the first in rotation to the last, then those
		// before it.
		for pass := range 2 {
			seen := 0
			for i, key := range keys {
				if key != best {
					continue
				}
				if (pass == 0) == (seen >= first) && len(targets) < k {
					targets = append(targets, scored[i].Endpoint)
					keys[i] = Taken
				}
				seen++
			}
		}
	}
	return &scheduling.ProfileResult{Targets: targets}
}

// minTies returns the smallest key below Taken and how many entries have
// it. At least one entry must be below Taken.
func minTies(keys []uint64) (best uint64, ties int) {
	best = Taken
	for _, key := range keys {
		switch {
		case key < best:
			best, ties = key, 1
		case key == best:
			ties++
		}
	}
	return best, ties
}

// nthTie returns the index of the j-th entry (from 0) whose key is best.
func nthTie(keys []uint64, best uint64, j int) int {
	for i, key := range keys {
		if key == best {
			if j == 0 {
				return i
			}
			j--
		}
	}
	return -1 // unreachable when j < the number of ties
}
