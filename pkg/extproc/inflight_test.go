package extproc_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// One source of truth for requests in flight: the datastore's
// EndpointStats (what the ext_proc server counts) and the
// inflight-load-producer's view (what token-load-scorer and
// active-request-scorer read) give the same readings on every endpoint,
// through a pick of two targets and a fallback served by the second.
func TestFallbackLeavesOneInFlightCount(t *testing.T) {
	const cfg = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: inflight-load-producer
- type: queue-scorer
- type: max-score-picker
  parameters:
    maxNumOfEndpoints: 2
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`
	store := datastore.New(datastore.Options{})
	require.NoError(t, store.Replace([]datastore.EndpointSpec{
		{Name: "pod-1", Address: "127.10.0.1", Port: 8000},
		{Name: "pod-2", Address: "127.10.0.2", Port: 8000},
		{Name: "pod-3", Address: "127.10.0.3", Port: 8000},
	}))
	targets, _ := store.Targets()
	for i, tg := range targets {
		store.ReportScrape(tg.ID, datastore.ScrapeResult{Metrics: scheduling.Metrics{WaitingQueueSize: i * 5}})
	}
	store.Flush()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded, err := config.Load([]byte(cfg), config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
	require.NoError(t, err)
	view := loaded.Plugins["inflight-load-producer"].(scheduling.InFlightLoad)
	h := start(t, queueConfig, nil, func(o *extproc.Options) {
		o.Runtime = func() *extproc.Runtime { return &extproc.Runtime{Scheduler: loaded.Scheduler, Format: "openai"} }
		o.Endpoints = func() extproc.EndpointView { return store.Snapshot() }
		o.Stats = func(e *scheduling.Endpoint) extproc.Stats { return store.Stats(e.Key()) }
	})
	type reading struct{ requests, tokens int64 }
	readings := func() (ds, producer map[string]reading) {
		ds, producer = map[string]reading{}, map[string]reading{}
		for _, e := range store.Snapshot().All() {
			st := store.Stats(e.Key())
			ds[e.Name()] = reading{st.InFlight(), st.InFlightTokens()}
			r, tok := view.InFlight(e.Key())
			producer[e.Name()] = reading{r, tok}
		}
		return ds, producer
	}
	equal := func(what string, want map[string]reading) {
		t.Helper()
		ds, producer := readings()
		require.Equal(t, ds, producer, "%s: the datastore's and the producer's readings differ", what)
		require.Equal(t, want, ds, what)
	}

	stream, err := h.client.Process(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(reqHeaders("/v1/completions")))
	require.NoError(t, stream.Send(body(completion, true)))
	for range 2 { // headers and body responses
		_, err = stream.Recv()
		require.NoError(t, err)
	}
	tokens := scheduling.EstimateTokens(&scheduling.Request{BodyBytes: len(completion)})
	equal("routed to pod-1 with pod-2 as fallback", map[string]reading{"pod-1": {1, tokens}, "pod-2": {}, "pod-3": {}})

	// pod-1 refused the connection: the gateway fell back to pod-2.
	require.NoError(t, stream.Send(respHeaders("127.10.0.2:8000", false, ":status", "200")))
	_, err = stream.Recv()
	require.NoError(t, err)
	equal("served by the fallback", map[string]reading{"pod-1": {}, "pod-2": {1, tokens}, "pod-3": {}})

	require.NoError(t, stream.Send(respBody(`{"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, true)))
	_, err = stream.Recv()
	require.NoError(t, err)
	equal("completed", map[string]reading{"pod-1": {}, "pod-2": {}, "pod-3": {}})
}
