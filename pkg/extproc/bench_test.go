package extproc_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// benchPods are n endpoints with varied load.
func benchPods(n int) []*scheduling.Endpoint {
	eps := make([]*scheduling.Endpoint, n)
	for i := range eps {
		eps[i] = endpoint(fmt.Sprintf("pod-%d", i), fmt.Sprintf("127.10.%d.%d", i/250, i%250+1), 8000,
			scheduling.Metrics{WaitingQueueSize: i % 7, RunningRequestsSize: i % 13, KVCacheUsagePercent: float64(i%10) / 10})
	}
	return eps
}

// benchRequest is one whole request as the gateway sends it: headers, a
// 4 KB chat body, response headers and a JSON response with usage.
func benchMessages(i int) []*extprocv3.ProcessingRequest {
	system := strings.Repeat("You are a helpful assistant for a router company. ", 70) // ~3.5 KB shared prefix
	b := fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":"question %d about routing"}],"max_tokens":64}`, system, i)
	return []*extprocv3.ProcessingRequest{
		reqHeaders("/v1/chat/completions"),
		body(b, true),
		respHeaders("", false, ":status", "200", "content-type", "application/json"),
		respBody(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":900,"completion_tokens":64,"total_tokens":964}}`, true),
	}
}

// oneRequest runs a request on its own stream and waits for the last
// response (4 responses: request headers, body, response headers, body).
func oneRequest(ctx context.Context, client extprocv3.ExternalProcessorClient, msgs []*extprocv3.ProcessingRequest) error {
	stream, err := client.Process(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs[:2] {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	for range 2 {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
	for _, m := range msgs[2:] {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	for range 2 {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
	return stream.CloseSend()
}

// benchLoop sends one request per iteration over client, cycling through
// 64 distinct prompts, with allocations reported.
func benchLoop(b *testing.B, client extprocv3.ExternalProcessorClient) {
	msgs := make([][]*extprocv3.ProcessingRequest, 64)
	for i := range msgs {
		msgs[i] = benchMessages(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := oneRequest(ctx, client, msgs[i%len(msgs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRequestPath is the whole request path over a real gRPC
// connection on loopback: the default configuration (queue, KV and prefix
// scorers) over 100 endpoints, one stream per request.
func BenchmarkRequestPath(b *testing.B) {
	h := start(b, string(configfiles.Default), benchPods(100))
	benchLoop(b, h.client)
}

// BenchmarkRequestPathConcurrent64 keeps 64 streams open at once and
// reports the per-request latency percentiles.
func BenchmarkRequestPathConcurrent64(b *testing.B) {
	h := start(b, string(configfiles.Default), benchPods(100))
	const streams = 64
	msgs := make([][]*extprocv3.ProcessingRequest, streams)
	for i := range msgs {
		msgs[i] = benchMessages(i)
	}
	ctx := context.Background()
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	work := make(chan int)
	errs := make(chan error, streams)
	b.ReportAllocs()
	b.ResetTimer()
	for w := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, b.N/streams+1)
			for range work {
				t0 := time.Now()
				if err := oneRequest(ctx, h.client, msgs[w]); err != nil {
					select {
					case errs <- err:
					default:
					}
					continue // keep draining work so the feeder never blocks
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	for i := 0; i < b.N; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*50/100].Microseconds()), "p50-us")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-us")
	}
}
