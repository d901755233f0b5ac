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
	if !ok || pm == nil || pm.TotalBlocks <= 0 || pm.Hits == nil {
		return
	}
	inv := 1 / float64(pm.TotalBlocks)
	if h, ok := pm.Hits.(*prefixHits); ok {
		// This package's producer resolved the candidates to index ids, so
		// no endpoint needs a lookup by key.
		h.scoreInto(endpoints, scores, inv)
		return
	}
	if pm.Hits.Len() == 0 {
		return
	}
	for i, e := range endpoints {
		if n := pm.Hits.MatchedBlocks(e); n > 0 {
			scores[i] = float64(n) * inv
		}
	}
}
