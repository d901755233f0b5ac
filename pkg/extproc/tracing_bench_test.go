package extproc_test

import (
	"testing"

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
			benchLoop(b, h.client)
		})
	}
}
