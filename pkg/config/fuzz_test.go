package config_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// FuzzLoad feeds arbitrary documents to the loader: it must never panic,
// and must either load or return a *ValidationError (or a read error), each
// entry with a message.
func FuzzLoad(f *testing.F) {
	f.Add(configfiles.Default)
	entries, _ := fs.ReadDir(configfiles.Samples, "samples")
	for _, e := range entries {
		data, _ := fs.ReadFile(configfiles.Samples, "samples/"+e.Name())
		f.Add(data)
	}
	f.Add([]byte(header + "plugins:\n- type: prefix-cache-scorer\n  parameters: {blockSizeTokens: -1, lruCapacityPerServer: 0}\n"))
	f.Add([]byte(header + "plugins:\n- name: p\n  type: strategy-picker\n  parameters: {strategy: consistent-hash, strategyParameters: {virtualNodes: 3}, maxNumOfEndpoints: 2}\n"))
	f.Add([]byte(header + "plugins:\n- name: p\n  type: strategy-picker\n  parameters: {strategy: EngineLoad, strategyParameters: {baseStrategy: LeastBusy}}\n- name: p/strategy\n  type: random-picker\n"))
	f.Add([]byte(header + "featureGates: [flowControl]\nplugins:\n- {name: rr, type: round-robin-fairness-policy}\n- {name: s, type: slo-deadline-ordering-policy}\n" +
		"flowControl:\n  maxBytes: 1Gi\n  maxRequests: 1k\n  defaultRequestTTL: 30s\n  noEndpointRequestTTL: 5m\n  defaultNegativePriorityBand: {maxRequests: 5}\n" +
		"  priorityBands:\n  - {priority: 10, maxBytes: 10Mi, fairnessPolicyRef: rr, orderingPolicyRef: s}\n  usageLimitPolicyPluginRef: static-usage-limit-policy\n"))
	f.Add([]byte("{}"))
	f.Add([]byte("- a\n- b\n"))
	reg := plugins.InTree()
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		loaded, err := config.Load(data, config.Options{Registry: reg, Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
		if err != nil {
			var verr *config.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error is not a *ValidationError: %T %v", err, err)
			}
			if len(verr.Errors) == 0 {
				t.Fatal("ValidationError without errors")
			}
			for _, e := range verr.Errors {
				if e.Msg == "" {
					t.Fatalf("error without a message at %q", e.Path)
				}
			}
			return
		}
		if loaded.Scheduler == nil || loaded.Parser == nil || loaded.SaturationDetector == nil {
			t.Fatalf("loaded configuration is incomplete: %+v", loaded)
		}
		loaded.Close()
	})
}
