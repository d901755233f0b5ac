package concurrency_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/plugins/saturation/concurrency"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestReadsTheProducerThroughConfig loads a configuration that names only
// the detector: the loader adds the inflight-load-producer it reads, and
// the saturation follows the requests the scheduler sends and completes.
func TestReadsTheProducerThroughConfig(t *testing.T) {
	t.Parallel()
	const doc = `
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: concurrency
  type: concurrency-detector
  parameters:
    maxConcurrency: 2
saturationDetector:
  pluginRef: concurrency
`
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	loaded, err := config.Load([]byte(doc), config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var producers int
	for _, p := range loaded.Plugins {
		if p.TypedName().Type == "inflight-load-producer" {
			producers++
		}
	}
	if producers != 1 {
		t.Fatalf("%d inflight-load-producer instances loaded, want 1 (plugins: %v)", producers, loaded.Plugins)
	}
	det, ok := loaded.SaturationDetector.(*concurrency.Detector)
	if !ok {
		t.Fatalf("saturation detector is %T", loaded.SaturationDetector)
	}

	sched := loaded.Scheduler
	eps := schedulingtest.Endpoints(2, nil) // capacity 2 × 2 = 4 requests
	// saturation reads the detector the way Admit does: on a request the
	// producers have prepared.
	saturation := func() float64 {
		t.Helper()
		req := &scheduling.Request{ID: "probe", Model: "m", TargetModel: "m"}
		sched.Prepare(ctx, req, eps)
		return det.Saturation(ctx, req, eps)
	}
	if got := saturation(); got != 0 {
		t.Fatalf("idle: Saturation() = %v, want 0", got)
	}

	var inFlight []*scheduling.Request
	for i := range 4 {
		req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m", PromptTokens: 10}
		if _, err := sched.Process(ctx, req, eps); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		inFlight = append(inFlight, req)
		if got, want := saturation(), float64(i+1)/4; math.Abs(got-want) > 1e-9 {
			t.Fatalf("after %d requests: Saturation() = %v, want %v", i+1, got, want)
		}
	}

	// Saturated: a sheddable request is refused with 429.
	shed := &scheduling.Request{ID: "shed", Model: "m", TargetModel: "m", Priority: -1}
	_, err = sched.Process(ctx, shed, eps)
	var refusal *scheduling.RefusalError
	if !errors.As(err, &refusal) || refusal.Refusal.StatusCode != 429 {
		t.Fatalf("sheddable request at saturation: err = %v, want a 429 refusal", err)
	}

	for i, req := range inFlight {
		sched.ResponseComplete(ctx, req, &scheduling.Response{EndOfStream: true}, nil)
		if got, want := saturation(), float64(len(inFlight)-i-1)/4; math.Abs(got-want) > 1e-9 {
			t.Fatalf("after %d completions: Saturation() = %v, want %v", i+1, got, want)
		}
	}

	// Idle again: the sheddable request is admitted.
	if _, err := sched.Process(ctx, &scheduling.Request{ID: "late", Model: "m", TargetModel: "m", Priority: -1}, eps); err != nil {
		t.Fatalf("sheddable request when idle: %v", err)
	}
}
