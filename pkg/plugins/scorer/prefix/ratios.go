package prefix

import "github.com/switchyard-ai/switchyard/pkg/scheduling"

// MatchRatios writes into dst[i] the fraction of the request's prompt
// blocks that endpoints[i] holds (matched / total blocks, in [0, 1]) and
// reports whether the request carries a usable match: a PrefixMatch under
// scheduling.PrefixMatchKey with at least one block. dst must be as long
// as endpoints and arrive zeroed; endpoints without a hit keep 0, and
// nothing is written when it returns false.
//
// It is what the prefix-cache-scorer computes, for plugins that build on
// the same match data (the engine-load-scorer takes part only among
// endpoints holding enough of the prefix). With this package's producer
// it resolves the candidates without a lookup by key; with another
// producer it asks PrefixHits for each endpoint.
func MatchRatios(req *scheduling.Request, endpoints []*scheduling.Endpoint, dst []float64) bool {
	pm, ok := scheduling.PrefixMatchKey.Get(req)
	if !ok || pm == nil || pm.TotalBlocks <= 0 {
		return false
	}
	if pm.Hits == nil {
		return true
	}
	inv := 1 / float64(pm.TotalBlocks)
	if h, ok := pm.Hits.(*prefixHits); ok {
		h.scoreInto(endpoints, dst, inv)
		return true
	}
	if pm.Hits.Len() == 0 {
		return true
	}
	for i, e := range endpoints {
		if n := pm.Hits.MatchedBlocks(e); n > 0 {
			dst[i] = min(float64(n)*inv, 1)
		}
	}
	return true
}
