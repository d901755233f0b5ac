package server

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

// strategyConfig is a configuration whose one profile has no scorer, so
// its strategy-picker's strategy decides every pick.
func strategyConfig(strategy string) string {
	return `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: p
  type: strategy-picker
  parameters:
    strategy: ` + strategy + `
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: p
`
}

// openRequest routes a request on a new stream and leaves it open (no
// response yet): the request is in flight at the endpoint it was sent to,
// whose name it returns with a function that completes it.
func openRequest(t *testing.T, s *Server, client extprocv3.ExternalProcessorClient) (string, func()) {
	t.Helper()
	stream, err := client.Process(context.Background())
	require.NoError(t, err)
	dest := route(t, stream)
	e, ok := s.Store().Snapshot().ByHostPort(dest)
	require.True(t, ok, "routed to %s, not an endpoint of the pool", dest)
	finish := func() {
		require.NoError(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}, EndOfStream: true},
		}}))
		_, err := stream.Recv()
		require.NoError(t, err)
		require.NoError(t, stream.CloseSend())
		for {
			if _, err := stream.Recv(); err != nil {
				require.True(t, errors.Is(err, io.EOF), "stream ended with %v", err)
				return
			}
		}
	}
	return e.Name(), finish
}

// inFlight returns the datastore's in-flight count of each endpoint.
func inFlight(t *testing.T, s *Server) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, e := range s.Store().Snapshot().All() {
		st, ok := datastore.StatsKey.Get(e)
		require.True(t, ok)
		out[e.Name()] = st.InFlight()
	}
	return out
}

// TestC05_ReloadChangesStrategyKeepsInFlight: a reload that changes the
// strategy takes effect from the next request, and the in-flight counters
// of requests still open (and the endpoints' membership) survive it,
// because they live in the datastore: the new least-busy strategy sees the
// requests the round-robin one sent, and their completion after the
// reload releases them. Real modelsim servers on 127.0.0.1, a real gRPC
// stream per request.
func TestC05_ReloadChangesStrategyKeepsInFlight(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(strategyConfig("RoundRobin")), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 3), ConfigFile: cfgFile})
	// Every endpoint scraped (not the fail-open of an all-stale start).
	require.Eventually(t, func() bool {
		snap := s.Store().Snapshot()
		return len(snap.Ready()) == 3 && !snap.FailOpen()
	}, 10*time.Second, 10*time.Millisecond)
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	first := s.gen.Load()
	require.Equal(t, "round-robin-picker", first.loaded.Plugins["p/strategy"].TypedName().Type)

	// Round robin sends two open requests to sim-0 and sim-1.
	a, finishA := openRequest(t, s, client)
	b, finishB := openRequest(t, s, client)
	require.Equal(t, []string{"sim-0", "sim-1"}, []string{a, b})
	require.Equal(t, map[string]int64{"sim-0": 1, "sim-1": 1, "sim-2": 0}, inFlight(t, s))

	// The strategy becomes LeastBusy. (The file watcher may reload too;
	// Reload is serialised and a second load of the same file keeps
	// everything.)
	writeAtomic(t, cfgFile, strategyConfig("least-busy"))
	require.NoError(t, s.Reload())
	second := s.gen.Load()
	require.NotSame(t, first, second)
	require.Equal(t, "least-busy-picker", second.loaded.Plugins["p/strategy"].TypedName().Type)
	require.NotSame(t, first.loaded.Plugins["p/strategy"], second.loaded.Plugins["p/strategy"])
	require.Equal(t, 3, s.Store().Snapshot().Len(), "membership survives the reload")
	require.Equal(t, map[string]int64{"sim-0": 1, "sim-1": 1, "sim-2": 0}, inFlight(t, s), "in-flight counts survive the reload")

	// The next request goes to the only idle endpoint (a new round robin
	// would have started again at sim-0).
	c, finishC := openRequest(t, s, client)
	require.Equal(t, "sim-2", c)
	// The requests opened before the reload complete on the configuration
	// they started on, and release their counts; least-busy sees it.
	finishA()
	require.Eventually(t, func() bool { return inFlight(t, s)["sim-0"] == 0 }, 5*time.Second, 5*time.Millisecond)
	d, finishD := openRequest(t, s, client)
	require.Equal(t, "sim-0", d)
	finishB()
	finishC()
	finishD()
	require.Eventually(t, func() bool {
		return s.Store().Snapshot().Len() == 3 && inFlight(t, s)["sim-1"] == 0 && inFlight(t, s)["sim-2"] == 0 && inFlight(t, s)["sim-0"] == 0
	}, 5*time.Second, 5*time.Millisecond)

	// A reload that keeps the strategy keeps its instance (and its state).
	writeAtomic(t, cfgFile, strategyConfig("LeastBusy"))
	require.NoError(t, s.Reload())
	third := s.gen.Load()
	require.Same(t, second.loaded.Plugins["p/strategy"], third.loaded.Plugins["p/strategy"])
	require.Same(t, second.loaded.Plugins["p"], third.loaded.Plugins["p"])
}

// Config.SelectionStrategy is every load's override: it survives reloads
// of a file that names another strategy.
func TestSelectionStrategyOverridesEveryLoad(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(strategyConfig("RoundRobin")), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), ConfigFile: cfgFile, SelectionStrategy: "Random"})
	require.Equal(t, "random-picker", s.gen.Load().loaded.Plugins["p/strategy"].TypedName().Type)
	writeAtomic(t, cfgFile, strategyConfig("least-busy"))
	require.NoError(t, s.Reload())
	require.Equal(t, "random-picker", s.gen.Load().loaded.Plugins["p/strategy"].TypedName().Type)
	require.NotEmpty(t, s.gen.Load().loaded.Notes)
}
