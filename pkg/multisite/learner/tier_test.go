package learner

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// TierOf names the tier the site stage puts a ready, live, undemoted site
// in when it is the only candidate, for every combination of the tier
// inputs: one rule for /debug/sites, the demo's table and the stage.
func TestTierOfMatchesTheSiteStage(t *testing.T) {
	var h sitestate.Holder
	st, err := sitestage.New(sitestage.Options{Holder: &h, LocalSite: "a", LocalCluster: "ca", Seed: 1})
	require.NoError(t, err)
	for bits := range 1 << 5 {
		s := sitestate.Site{
			Name: "a", Cluster: "ca", Local: true, Ready: true,
			Telemetry:     bits&1 != 0,
			PublishesLoad: bits&2 != 0,
			Room:          bits&4 != 0,
			Queued:        bits&8 != 0,
			Full:          bits&16 != 0,
		}
		h.Store(&sitestate.Snapshot{Version: uint64(bits + 1), Sites: []sitestate.Site{s}, AnyModel: true})
		d := st.Decide("m", nil)
		require.Nil(t, d.Refusal, "%+v", s)
		assert.Equal(t, d.Tier.String(), strings.ToLower(TierOf(&s)), "%+v", s)
	}
}
