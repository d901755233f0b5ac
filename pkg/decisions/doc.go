// Package decisions keeps the recent routing decisions of an EPP, so that
// one decision can be explained afterwards: a Ring of a fixed number of
// Records, each bounded in size, and the HTTP handler of
// /debug/decisions that serves them as JSON, filtered by request id,
// model and endpoint.
//
// # Who imports it
//
// pkg/extproc builds a Record per request (routed or refused) and adds it
// to the Ring; pkg/server creates the Ring (--decision-buffer-size) and
// serves Handler on the metrics port, behind the same guard as the other
// debug endpoints. It imports pkg/scheduling for the profile-run types
// (scheduling.ProfileRun) and nothing else of the project.
//
// # Concurrency and memory
//
// The package starts no goroutine. Ring.Add is called on the request path
// by many streams at once: it takes no lock, only an atomic counter and
// one atomic pointer store per record. A Record is immutable once added;
// readers (Ring.Snapshot, the handler) load the slots and share the
// records. The Ring holds at most its size in records, and each Record at
// most the limits of scheduling.ExplainLimits, MaxExplainRuns runs and
// the string caps below, so its memory is bounded (TestRingMemoryBounded,
// BenchmarkRingAdd).
package decisions
