package prefix

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Scorer is prefix-cache-scorer: it scores each endpoint with the fraction
// of the prompt's blocks the producer believes it holds. It keeps no state
// and is safe for concurrent use.
type Scorer struct {
	typedName      scheduling.TypedName
	producerParams []byte
}

// NewScorer builds a prefix-cache-scorer. The parameters only matter when
// the loader creates the producer from them (DefaultProducer).
func NewScorer(name string, p Params, _ scheduling.Handle) (*Scorer, error) {
	if name == "" {
		name = ScorerType
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode producer parameters: %w", err)
	}
	return &Scorer{typedName: scheduling.TypedName{Type: ScorerType, Name: name}, producerParams: raw}, nil
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Affinity }

// Consumes implements scheduling.DataConsumer.
func (s *Scorer) Consumes() []string { return []string{scheduling.PrefixMatchKey.Name()} }

// DefaultProducer implements scheduling.DefaultProducer: without a
// configured producer of the prefix match, the loader creates an
// approx-prefix-cache-producer with this scorer's parameters, as GIE does.
func (s *Scorer) DefaultProducer(key string) (string, []byte, bool) {
	if key != scheduling.PrefixMatchKey.Name() {
		return "", nil, false
	}
	return ProducerType, append([]byte(nil), s.producerParams...), true
}

// Score implements scheduling.Scorer: matched blocks / total blocks, 0
// without a match.
func (s *Scorer) Score(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	pm, ok := scheduling.PrefixMatchKey.Get(req)
	if !ok || pm == nil || pm.TotalBlocks <= 0 || len(pm.Matched) == 0 {
		return
	}
	inv := 1 / float64(pm.TotalBlocks)
	if len(pm.Matched) > signatureMaxKeys {
		for i, e := range endpoints {
			if n := pm.Matched[e.Key()]; n > 0 {
				scores[i] = float64(n) * inv
			}
		}
		return
	}
	// Few endpoints matched (the usual case): a 256-bit signature filter
	// skips the map lookup for almost every endpoint without a hit.
	var sig [4]uint64
	for k := range pm.Matched {
		b := keySignature(k)
		sig[b>>6] |= 1 << (b & 63)
	}
	for i, e := range endpoints {
		k := e.Key()
		if b := keySignature(k); sig[b>>6]&(1<<(b&63)) == 0 {
			continue
		}
		if n := pm.Matched[k]; n > 0 {
			scores[i] = float64(n) * inv
		}
	}
}

// signatureMaxKeys is the largest Matched map Score filters by signature.
const signatureMaxKeys = 32

// keySignature maps an endpoint key to one of 256 bits from its length and
// a few of its bytes; endpoint keys differ in their ends (pod suffixes,
// ranks) and middles.
func keySignature(k string) uint8 {
	n := len(k)
	if n == 0 {
		return 0
	}
	x := uint64(n) | uint64(k[n-1])<<8 | uint64(k[n/2])<<16 | uint64(k[(3*n)/4])<<24 | uint64(k[max(n-2, 0)])<<32 | uint64(k[max(n-3, 0)])<<40
	return uint8((x * 0x9E3779B97F4A7C15) >> 56)
}
