package scrape

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestBrokenMetricsNeverWinAPick reproduces finding 3 of issue 9: model
// servers whose /metrics report NaN, ±Inf, negative or no load values read
// as idle and took most requests from healthy, loaded servers. Over the
// snapshot's Ready endpoints, the default scheduling profile
// (config/default.yaml with the in-tree plugins) never picks one while a
// healthy endpoint exists.
func TestBrokenMetricsNeverWinAPick(t *testing.T) {
	var specs []datastore.EndpointSpec
	healthy := map[string]bool{}
	for i, load := range []struct{ queue, running, kv string }{{"4", "8", "0.6"}, {"6", "8", "0.7"}, {"9", "12", "0.9"}} {
		name := fmt.Sprintf("healthy-%d", i)
		healthy[name] = true
		specs = append(specs, newMetricsServer(t, vllmLoad(load.queue, load.running, load.kv)).spec(t, name))
	}
	for _, b := range brokenEndpoints {
		specs = append(specs, newMetricsServer(t, b.body).spec(t, b.name))
	}
	h := start(t, 0, defaultConfig(t), Options{}, specs...)
	require.Eventually(t, func() bool { return len(h.ready()) == len(healthy) }, wait, time.Millisecond)

	loaded, err := config.Load(configfiles.Default, config.Options{Registry: plugins.InTree(), Context: t.Context(), Registerer: prometheus.NewRegistry(), Seed: 1})
	require.NoError(t, err)
	picks := map[string]int{}
	for i := range 200 {
		sn := h.store.Snapshot()
		require.False(t, sn.FailOpen())
		req := &scheduling.Request{
			ID:     fmt.Sprintf("req-%d", i),
			Model:  "m",
			Prompt: scheduling.Prompt{Text: fmt.Appendf(nil, "prompt %d: tell me about endpoint pickers", i%7)},
		}
		res, err := loaded.Scheduler.Process(context.Background(), req, sn.Ready())
		require.NoError(t, err)
		target := res.Targets()[0].Name()
		picks[target]++
		require.True(t, healthy[target], "request %d went to the broken endpoint %s (picks so far: %v)", i, target, picks)
	}
	t.Logf("picks: %v", picks)
	assert.Equal(t, 200, picks["healthy-0"]+picks["healthy-1"]+picks["healthy-2"])
}
