package scheduling

// Well-known per-request data shared between plugins that must not import
// each other. A producer declares the key's name in Produces, a consumer in
// Consumes.

// PrefixHits tells how many leading prompt blocks each endpoint is believed
// to hold. Implementations are read-only once stored on a request, safe
// for concurrent reads, and stay valid for as long as a plugin holds them:
// a producer must not reuse their memory for a later request, and later
// changes to its own state must not change what they report.
//
// MatchedBlocks typically costs a map lookup by endpoint key, so a
// consumer that visits every candidate should return early when Len is 0.
type PrefixHits interface {
	// MatchedBlocks returns the number of leading prompt blocks the
	// endpoint holds, 0 when none.
	MatchedBlocks(e *Endpoint) int
	// Len returns the number of endpoints with at least one block.
	Len() int
	// Range calls f for every endpoint key with at least one block, in no
	// particular order, until f returns false.
	Range(f func(endpointKey string, blocks int) bool)
}

// PrefixHitMap is a PrefixHits keyed by Endpoint.Key, for producers with
// few hits and for tests.
type PrefixHitMap map[string]int

// MatchedBlocks implements PrefixHits.
func (m PrefixHitMap) MatchedBlocks(e *Endpoint) int { return m[e.Key()] }

// Len implements PrefixHits.
func (m PrefixHitMap) Len() int {
	n := 0
	for _, b := range m {
		if b > 0 {
			n++
		}
	}
	return n
}

// Range implements PrefixHits.
func (m PrefixHitMap) Range(f func(string, int) bool) {
	for k, b := range m {
		if b > 0 && !f(k, b) {
			return
		}
	}
}

// PrefixMatch is the result of matching a request's prompt against an
// approximate prefix-cache index.
type PrefixMatch struct {
	// TotalBlocks is the number of prompt blocks looked up (after
	// truncation to the configured maximum). Zero when the prompt is
	// shorter than one block.
	TotalBlocks int
	// BlockSizeTokens is the block size used, in tokens.
	BlockSizeTokens int
	// Hits are the endpoints holding leading blocks; nil when none does.
	Hits PrefixHits
}

// MatchedBlocks returns the leading prompt blocks an endpoint holds.
func (m *PrefixMatch) MatchedBlocks(e *Endpoint) int {
	if m == nil || m.Hits == nil {
		return 0
	}
	return m.Hits.MatchedBlocks(e)
}

// HitCount returns the number of endpoints with at least one block.
func (m *PrefixMatch) HitCount() int {
	if m == nil || m.Hits == nil {
		return 0
	}
	return m.Hits.Len()
}

// Ratio returns matched/total blocks for an endpoint, in [0, 1].
func (m *PrefixMatch) Ratio(e *Endpoint) float64 {
	if m == nil || m.TotalBlocks == 0 || m.Hits == nil {
		return 0
	}
	return float64(m.Hits.MatchedBlocks(e)) / float64(m.TotalBlocks)
}

// PrefixMatchKey holds the request's *PrefixMatch.
var PrefixMatchKey = NewStateKey[*PrefixMatch]("prefix-cache-match-info")

// InFlightLoad reports, per endpoint key, the requests sent to it that have
// not completed and their estimated token load (what counts as load depends
// on the producer's accounting; see inflight-load-producer).
type InFlightLoad interface {
	InFlight(endpointKey string) (requests, tokens int64)
}

// InFlightLoadKey holds the request's view of in-flight load.
var InFlightLoadKey = NewStateKey[InFlightLoad]("inflight-load")
