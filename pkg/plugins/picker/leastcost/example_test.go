package leastcost_test

import (
	"context"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func load(t *testing.T, doc string) *config.Loaded {
	t.Helper()
	loaded, err := config.Load([]byte(doc), config.Options{Registry: plugins.InTree(), Context: context.Background(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(loaded.Close)
	return loaded
}

// TestC27_TierFilterInAConfiguration: a smart-routing tier is a
// label-selector-filter ahead of the least-cost-picker; the scheduler
// ranks by cost within the tier only.
func TestC27_TierFilterInAConfiguration(t *testing.T) {
	loaded := load(t, `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - name: premium-tier
    type: label-selector-filter
    parameters:
      matchLabels:
        tier: premium
  - type: least-cost-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: premium-tier
      - pluginRef: least-cost-picker
`)
	mk := func(name, tier string, in float64) *scheduling.Endpoint {
		return schedulingtest.Endpoint(name).Label("tier", tier).
			Models(scheduling.ModelEntry{Name: "m", Pricing: &scheduling.Price{Input: in, Output: 1}}).Build()
	}
	candidates := []*scheduling.Endpoint{mk("budget", "economy", 0.01), mk("premium-dear", "premium", 3), mk("premium-cheap", "premium", 1)}
	req := &scheduling.Request{Model: "m", TargetModel: "m", PromptTokens: 100, MaxOutputTokens: 10}
	res, err := loaded.Scheduler.Schedule(t.Context(), req, candidates)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Targets()[0].Name(); got != "premium-cheap" {
		t.Errorf("picked %s, want premium-cheap", got)
	}
}
