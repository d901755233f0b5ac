// Package quality is the routing-quality benchmark: the same seeded trace of
// streamed completions is replayed through the in-repo gateway
// (pkg/gateway, playing Envoy) against a fleet of modelsim endpoints with
// each router in turn (round robin, GIE v1.5.0's default profile,
// Switchyard's default profile and Switchyard's best profile), and the
// client-side time to first token, output tokens per second, the fleet's
// prefix-cache hit rate (modelsim's /metrics) and the requests per endpoint
// are reported per router and load step.
//
// The untagged files are the parts CI unit-tests: trace generation
// (trace.go), the replaying client and its streamed-response parser
// (client.go, stream.go), the metrics scraper (metrics.go) and the tables
// and charts (results.go). The driver (quality_test.go) is behind the
// `bench` build tag and runs with `make bench-quality` /
// `make bench-quality-full`.
//
// Goroutines: Replay dispatches in its caller's goroutine and owns one
// goroutine per request in flight and one that runs the step-boundary
// hooks in order; all have ended when it returns. The driver's modelsim
// servers, gateway and EPP process are stopped before the next router
// starts.
package quality
