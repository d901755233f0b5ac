package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
)

// routeObjective sends one request naming an objective.
func routeObjective(t *testing.T, s *Server, objective string) {
	t.Helper()
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	stream, err := client.Process(context.Background())
	require.NoError(t, err)
	require.NoError(t, stream.Send(headers(false, ":path", "/v1/completions", ":method", "POST", "x-gateway-inference-objective", objective)))
	require.NoError(t, stream.Send(reqBody(`{"model":"m","prompt":"hello"}`)))
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, stream.CloseSend())
}

// TestObjectivesFileSetsPriority: in standalone mode the objectives file
// gives a request named by x-gateway-inference-objective its priority
// (inference_objective_request_total{priority}); an edit takes over
// without a restart, and a removed objective's requests get priority 0.
func TestObjectivesFileSetsPriority(t *testing.T) {
	path := filepath.Join(t.TempDir(), "objectives.yaml")
	require.NoError(t, os.WriteFile(path, []byte("objectives:\n- {name: critical, priority: 7}\n"), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), ObjectivesFile: path, SecureServing: false})
	routeObjective(t, s, "critical")
	require.Equal(t, 1.0, counterValue(t, s, "inference_objective_request_total", "priority", "7"))

	writeAtomic(t, path, "objectives:\n- {name: other, priority: 3}\n")
	require.Eventually(t, func() bool { _, ok := s.Objectives().Lookup("critical"); return !ok }, 10*time.Second, 10*time.Millisecond)
	routeObjective(t, s, "critical")
	require.Equal(t, 1.0, counterValue(t, s, "inference_objective_request_total", "priority", "0"))
}

func TestObjectivesFileErrorStopsStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "objectives.yaml")
	require.NoError(t, os.WriteFile(path, []byte("objectives:\n- {name: critical, priority: x}\n"), 0o600))
	_, err := New(Config{EndpointsFile: sims(t, 1), ObjectivesFile: path, GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"})
	require.ErrorContains(t, err, "objectives[0].priority")
}
