package extproc_test

import (
	"context"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/tracing/tracingtest"
)

// BenchmarkRequestPathTracing is BenchmarkRequestPath (a whole request
// over a real gRPC stream, default configuration, 100 endpoints) with
// tracing off, on but not sampled (only traceparent goes upstream), and
// sampled (every span exported to an in-process OTLP collector).
func BenchmarkRequestPathTracing(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler string // "" is off
	}{{"off", ""}, {"unsampled", "always_off"}, {"sampled", "always_on"}} {
		b.Run(c.name, func(b *testing.B) {
			var tweak []func(*extproc.Options)
			if c.sampler != "" {
				coll := tracingtest.Start(b)
				tweak = append(tweak, withTracer(newProvider(b, coll.Endpoint(), c.sampler, 1)))
			}
			h := start(b, string(configfiles.Default), benchPods(100), tweak...)
			msgs := make([][]*extprocv3.ProcessingRequest, 64)
			for i := range msgs {
				msgs[i] = benchMessages(i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := oneRequest(ctx, h.client, msgs[i%len(msgs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
