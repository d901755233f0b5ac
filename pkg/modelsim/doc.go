// Package modelsim is a simulated vLLM model server: an OpenAI-compatible HTTP
// API (/v1/completions, /v1/chat/completions, /v1/models), /health, and a
// Prometheus /metrics endpoint with vLLM's metric names, driven by a small
// engine model of continuous batching, a paged KV cache and automatic prefix
// caching.
//
// It exists so that an endpoint picker's decisions visibly matter without a
// GPU: queue depth, KV-cache usage and prefix-cache hits move the way they do
// on a real vLLM server, and latency follows from them. Switchyard's `epp
// demo` starts several of them in-process on loopback, and the end-to-end
// tests and benchmarks use them as model servers. cmd/modelsim wraps it in a
// standalone binary.
//
// # Engine
//
// A single scheduler goroutine (started by [Server.Start]) runs steps. Each
// step admits waiting requests in FIFO order while fewer than
// [Config.MaxRunning] run and the KV cache has room for the prompt, prefills
// admitted prompts (uncached tokens only, in chunks of at most
// [Config.MaxBatchedTokens] tokens per step), and decodes one token for every
// running sequence. A step lasts
//
//	(DecodeBase + DecodePerSeq×(sequences in the step − 1) + PrefillPerToken×prefill tokens) × TimeScale
//
// When the KV cache runs out during decoding the newest running sequence is
// preempted back to the front of the waiting queue (vLLM's recompute
// preemption). README.md in this folder has the full model, its formulas and
// the reasoning behind the defaults.
//
// # Tokens
//
// The simulator has no tokenizer: a prompt of n bytes is ceil(n/4) tokens and
// a KV block holds the tokens of BlockSize×4 consecutive bytes. Generated
// tokens are filler words from a fixed list, chosen deterministically from
// [Config.Seed] and the prompt.
//
// # Metrics
//
// /metrics answers the Prometheus text format. name[] query parameters
// (/metrics?name[]=vllm:num_requests_waiting&name[]=…) restrict it to the
// families named, as vLLM's exporter (Prometheus client_python) does; an
// endpoint picker that asks only for the families it reads gets a few lines
// instead of every histogram.
//
// # Faults
//
// [Server.SetErrorRate], [Server.SetExtraLatency] and [Server.SetMetricsFault]
// can be flipped at run time from any goroutine, so tests can make an
// endpoint fail, slow down, or publish broken metrics.
//
// # Who imports it
//
// cmd/modelsim, cmd/epp (demo mode) and tests. It imports no other Switchyard
// package.
package modelsim
