package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
)

// renamed is a configuration whose plugins are all named after i.
func renamed(i int) string {
	return fmt.Sprintf(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- {type: queue-scorer, name: queue-%[1]d}
- {type: approx-prefix-cache-producer, name: producer-%[1]d}
- {type: prefix-cache-scorer, name: prefix-%[1]d}
- {type: max-score-picker, name: picker-%[1]d}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-%[1]d}, {pluginRef: prefix-%[1]d}, {pluginRef: picker-%[1]d}]
`, i)
}

// seriesCount returns the number of series of a family in the registry.
func seriesCount(t *testing.T, s *Server, name string) int {
	t.Helper()
	fams, err := s.Registry().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// routeAndFinish sends one request on a new stream and ends the stream, so
// that the request runs through the serving configuration up to its
// completion hooks.
func routeAndFinish(t *testing.T, client extprocv3.ExternalProcessorClient) {
	t.Helper()
	stream, err := client.Process(context.Background())
	require.NoError(t, err)
	require.NoError(t, stream.Send(headers(false, ":path", "/v1/completions", ":method", "POST", "x-request-id", "r1")))
	// Long enough for the prefix producer to index some blocks.
	require.NoError(t, stream.Send(reqBody(`{"model":"m","prompt":"`+strings.Repeat("a long shared prompt ", 20)+`"}`)))
	first, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, first.GetDynamicMetadata().GetFields()["envoy.lb"], "the request was routed")
	require.NoError(t, stream.CloseSend())
	for {
		if _, err := stream.Recv(); err != nil {
			require.True(t, errors.Is(err, io.EOF), "stream ended with %v", err)
			return
		}
	}
}

// Regression (issue 9, finding 4): 50 reloads that rename every plugin
// leave the number of plugin series where one configuration puts it;
// refused reloads change nothing, and shutdown releases the rest.
func TestReloadRenamesKeepSeriesCountConstant(t *testing.T) {
	const (
		durations = "inference_extension_plugin_duration_seconds"
		sizes     = "inference_extension_prefix_indexer_size"
	)
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(renamed(0)), 0o600))
	s, stop := run(t, Config{EndpointsFile: sims(t, 2), ConfigFile: cfgFile})
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	routeAndFinish(t, client)
	steady, steadySizes := seriesCount(t, s, durations), seriesCount(t, s, sizes)
	require.NotZero(t, steady)
	require.Equal(t, 1, steadySizes)

	for i := 1; i <= 50; i++ {
		writeAtomic(t, cfgFile, renamed(i))
		require.NoError(t, s.Reload())
		routeAndFinish(t, client)
		require.Equal(t, steady, seriesCount(t, s, durations), "%s series after reload %d", durations, i)
		require.Equal(t, steadySizes, seriesCount(t, s, sizes), "%s series after reload %d", sizes, i)
	}
	serving := s.gen.Load()
	require.Contains(t, serving.loaded.Plugins, "producer-50")

	// Refused reloads leave the serving configuration and its series alone.
	writeAtomic(t, cfgFile, strings.Replace(renamed(51), "type: max-score-picker", "type: no-such-picker", 1))
	require.Error(t, s.Reload())
	writeAtomic(t, cfgFile, renamed(52)+"# "+strings.Repeat("x", config.DefaultMaxConfigBytes)+"\n")
	err := s.Reload()
	require.ErrorContains(t, err, "more than the limit of 1048576 bytes")
	require.Same(t, serving, s.gen.Load())
	routeAndFinish(t, client)
	require.Equal(t, steady, seriesCount(t, s, durations))
	require.Equal(t, steadySizes, seriesCount(t, s, sizes))
	producer := serving.loaded.Plugins["producer-50"].(interface{ IndexSize() int })
	require.NotZero(t, producer.IndexSize(), "the serving producer was not closed")

	stop()
	require.Zero(t, seriesCount(t, s, durations), "shutdown releases the serving configuration")
	require.Zero(t, seriesCount(t, s, sizes))
}
