// Package kvsaturation implements the kv-saturation-admitter, the
// Continuum Router's KV-saturation admission (C-35): before any profile
// runs, a request is refused with 503, Retry-After and the reason
// admission_reject when every healthy candidate reports, in fresh metrics,
// a KV-cache usage above kvUsageThreshold (0.98), instead of piling work
// onto engines about to preempt. Only the candidates serving the request's
// target model count (scheduling.ModelsKey; an endpoint that declares no
// models serves every model), so an idle engine of another model does not
// admit a request to the saturated engines of its own.
//
// A candidate whose metrics are stale (older than scrapeInterval ×
// maxStalenessIntervals, the engine-load-picker's freshness rule, C-21) or
// were never scraped counts as not saturated, so one endpoint that reports
// nonsense, or none, cannot block a pool. A candidate the health check or
// circuit breaker put out of rotation is not a healthy candidate and does
// not count either way.
//
// The refusal is retryable: the ext_proc server moves such a request to
// the next model of its fallback chain (fallbackChains), when it has one.
// Refusals are counted in routing_admission_refusals_total{admitter,reason}
// (reason: admission_reject).
package kvsaturation
