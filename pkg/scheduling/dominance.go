package scheduling

// Strict dominance (C-37) and the record of who decided a pick: the typed
// seam between a term that asks for strict dominance (the
// usage-weight-scorer), the picker that applies it (the strategy-picker)
// and the term's accounting of the passes it decided. Both keys are owned
// here so that no plugin re-declares another plugin's key by name.

// StrictDominanceKey, set to true on a request by a scorer during Score,
// asks the profile's picker to decide by strict dominance: the candidate
// whose total weighted score is strictly greater than every other
// candidate's is the primary target, with no threshold and no margin;
// when the top total is tied, the picker's own rule (its selection
// strategy) decides. The usage-weight-scorer sets it when its largest
// contribution is above 0 and strictly greater than every other (a tied
// term sets nothing, so the picker's threshold and margin still apply to
// the other scorers) (C-37: "the term decides only if its largest
// contribution is above 0 and one candidate's total is strictly greater
// than every other; otherwise selection_strategy decides").
//
// A picker that honours it reads it with TakeStrictDominance, which also
// clears it, so that a later profile of the same request does not
// inherit it. Pickers that always take the highest total (max-score)
// need not read it.
var StrictDominanceKey = NewStateKey[bool]("switchyard.io/strict-dominance")

// TakeStrictDominance reports whether a scorer asked for strict dominance
// on req in this scheduling pass, and clears the request. A nil request
// never asks.
func TakeStrictDominance(req *Request) bool {
	if req == nil {
		return false
	}
	v, ok := StrictDominanceKey.Get(req)
	if ok {
		StrictDominanceKey.Delete(req)
	}
	return ok && v
}

// StrictlyDominant returns the index of the candidate whose Score is
// strictly greater than every other candidate's, or -1 when the top score
// is tied, there are no candidates, or a score is NaN at the top. A lone
// candidate dominates.
func StrictlyDominant(scored []ScoredEndpoint) int {
	if len(scored) == 0 {
		return -1
	}
	best := 0
	tied := false
	for i := 1; i < len(scored); i++ {
		switch s := scored[i].Score; {
		case s > scored[best].Score:
			best, tied = i, false
		case s == scored[best].Score:
			tied = true
		}
	}
	if tied || scored[best].Score != scored[best].Score {
		return -1
	}
	return best
}

// DecidedBy says what chose a picker's primary target. It is a small
// integer so that recording it on a request allocates nothing.
type DecidedBy uint8

// The values of DecidedByKey.
const (
	// DecidedByScorers: the profile's scorers decided (a clear lead, or
	// strict dominance when StrictDominanceKey was set).
	DecidedByScorers DecidedBy = iota + 1
	// DecidedByStrategy: the picker's selection strategy decided.
	DecidedByStrategy
)

// String returns "scorers", "strategy" or "unknown".
func (d DecidedBy) String() string {
	switch d {
	case DecidedByScorers:
		return "scorers"
	case DecidedByStrategy:
		return "strategy"
	}
	return "unknown"
}

// DecidedByKey records on the request who decided the primary target of
// the picker that ran last for it (the strategy-picker sets it on every
// pick that is not a FallbacksOnly call; with several profiles the last
// profile's pick wins). Every Profile.Run clears it first, so it is
// always the record of the latest profile run. Terms read it in
// PreRequest to count only the passes they decided (usage-weight-scorer,
// C-38). A request without it was last picked by a picker that records
// nothing.
var DecidedByKey = NewStateKey[DecidedBy]("switchyard.io/decided-by")
