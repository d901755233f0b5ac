package server

import (
	"context"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// endpointWarningsDebounce lets a burst of endpoint changes (a rollout)
// settle before the warnings are computed again.
const endpointWarningsDebounce = time.Second

// endpointWarningsLoop logs the configuration's warnings that depend on the
// endpoints (plugins.EndpointWarnings: LeastCost replicas without prices)
// when the configuration or the endpoint set changes, each new set of
// warnings once.
func (s *Server) endpointWarningsLoop(ctx context.Context) {
	var (
		last    []string
		lastGen *generation
	)
	check := func() {
		gen := s.gen.Load()
		ws := plugins.EndpointWarnings(gen.loaded, s.store.Snapshot().All())
		if gen == lastGen && slices.Equal(ws, last) {
			return
		}
		for _, w := range ws {
			if gen != lastGen || !slices.Contains(last, w) {
				s.log.Info("Configuration warning", "warning", w)
			}
		}
		last, lastGen = ws, gen
	}
	tick := time.NewTicker(endpointWarningsDebounce)
	defer tick.Stop()
	changed := s.store.Changed()
	dirty := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			changed = s.store.Changed()
			dirty = true
		case <-tick.C:
			// Also catches a reload: the generation is compared.
			if dirty || s.gen.Load() != lastGen {
				dirty = false
				check()
			}
		}
	}
}
