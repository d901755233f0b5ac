package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMultisiteGrid runs the three-site grid of issue 13 end to end.
func TestMultisiteGrid(t *testing.T) {
	g := startGrid(t, gridOpts{sites: []string{"a", "b", "c"}, site: map[string]gridSiteOpts{
		"a": {sims: 1}, "b": {sims: 2}, "c": {sims: 3},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := g.site("a")
	for _, r := range a.burst(ctx, 10, 4, 4, "smoke") {
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.status, r.body)
	}
	t.Run("cut", func(t *testing.T) {
		b := g.site("b")
		b.cut()
		defer b.heal()
		m0 := seriesAt(t, a.relayAdmin+"/metrics", "")
		require.Eventually(t, func() bool {
			m := seriesAt(t, a.relayAdmin+"/metrics", "")
			return m[series("grid_peer_poll_total", "peer", "b", "outcome", "unreachable")] >= m0[series("grid_peer_poll_total", "peer", "b", "outcome", "unreachable")]+2
		}, 30*time.Second, 20*time.Millisecond)
	})
}
