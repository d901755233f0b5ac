package scheduling

// Well-known per-request data shared between plugins that must not import
// each other. A producer declares the key's name in Produces, a consumer in
// Consumes.

// PrefixMatch is the result of matching a request's prompt against an
// approximate prefix-cache index.
type PrefixMatch struct {
	// TotalBlocks is the number of prompt blocks looked up (after
	// truncation to the configured maximum). Zero when the prompt is
	// shorter than one block.
	TotalBlocks int
	// BlockSizeTokens is the block size used, in tokens.
	BlockSizeTokens int
	// Matched maps an endpoint key to the number of leading prompt blocks
	// that endpoint is believed to hold. Endpoints without a hit are absent.
	Matched map[string]int
}

// Ratio returns matched/total blocks for an endpoint, in [0, 1].
func (m *PrefixMatch) Ratio(e *Endpoint) float64 {
	if m == nil || m.TotalBlocks == 0 {
		return 0
	}
	return float64(m.Matched[e.Key()]) / float64(m.TotalBlocks)
}

// PrefixMatchKey holds the request's *PrefixMatch.
var PrefixMatchKey = NewStateKey[*PrefixMatch]("prefix-cache-match-info")

// InFlightLoad reports, per endpoint key, the requests sent to it that have
// not completed and their estimated uncached prompt tokens.
type InFlightLoad interface {
	InFlight(endpointKey string) (requests, tokens int64)
}

// InFlightLoadKey holds the request's view of in-flight load.
var InFlightLoadKey = NewStateKey[InFlightLoad]("inflight-load")
