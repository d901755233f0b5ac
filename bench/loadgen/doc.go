// Package loadgen drives an endpoint picker (any EPP: Switchyard, GIE's,
// a null one) over the ext_proc gRPC protocol with the message sequence an
// Envoy ext_proc filter configured like GIE's reference gateway sends
// (request headers, request body chunks in FULL_DUPLEX_STREAMED mode,
// response headers, response body with usage; see pkg/gateway/doc.go for
// the same sequence played by the in-repo gateway), and measures it:
// latency to the routing decision and of the whole exchange in HdrHistogram
// recorders, the EPP's CPU seconds and peak RSS from /proc.
//
// Two load shapes: open loop (Poisson arrivals at a set rate, Schedule),
// where a slow EPP builds a backlog that shows in the latency, and closed
// loop (N concurrent streams back to back).
//
// # Who imports it
//
// bench/cmd/loadgen and the benchmark scripts; nothing in the product. It
// starts goroutines only inside Run, which waits for all of them before it
// returns.
package loadgen
