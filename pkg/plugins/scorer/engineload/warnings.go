package engineload

import (
	"fmt"
	"strconv"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// WeightWarnings checks the C-34 cap against the profiles' raw weights:
// the term's score is at most engineLoadWeight, so it adds at most
// engineLoadWeight of the base scale only while the scorer's profile
// weight is no larger than the sum of the other scorers' weights. It
// returns one warning per profile where the weight lifts the cap (the
// effective cap is named), or where there are no other scorers (the term
// then is the whole score among prefix holders). epp validate prints
// them; the server logs them.
func WeightWarnings(profiles []*scheduling.Profile) []string {
	var out []string
	for _, p := range profiles {
		var base float64
		type term struct {
			name   string
			weight float64
			cap    float64
		}
		var terms []term
		for _, ws := range p.Scorers() {
			if s, ok := ws.Scorer.(*Scorer); ok {
				terms = append(terms, term{s.TypedName().Name, ws.Weight, s.params.EngineLoadWeight})
				continue
			}
			base += ws.Weight
		}
		for _, t := range terms {
			switch {
			case t.weight == 0 || t.cap == 0:
			case base == 0:
				out = append(out, fmt.Sprintf("profile %q: %s %q has no base scorer beside it: the engine-load term is the whole score among prefix holders; give it the weight of the scorers it is added to (C-34)", p.Name(), Type, t.name))
			case t.weight > base*(1+1e-9):
				out = append(out, fmt.Sprintf("profile %q: %s %q has weight %s, more than the sum %s of the other scorers' weights: the term adds up to %s of the base scale instead of engineLoadWeight %s; set its weight to %s (C-34)",
					p.Name(), Type, t.name, ff(t.weight), ff(base), ff(t.cap*t.weight/base), ff(t.cap), ff(base)))
			}
		}
	}
	return out
}

func ff(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }
