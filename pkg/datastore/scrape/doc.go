// Package scrape polls the Prometheus /metrics endpoint of every model
// server in a datastore.Store and reports what it reads: waiting and
// running requests, KV-cache usage, LoRA adapters and KV-cache geometry,
// mapped per engine by the core-metrics-extractor (vLLM, SGLang,
// trtllm-serve, Triton TensorRT-LLM or configured engines).
//
// Who may import it: cmd/epp and the server, which build a Scraper from the
// loaded configuration's metrics-data-source and core-metrics-extractor
// and run it next to the endpoint sources.
//
// # Scraping
//
// Scraper.Run keeps one goroutine per endpoint, as GIE does, and one timer
// goroutine per round (below), all of them its own: it scrapes a
// new endpoint at once, then every Interval (--refresh-metrics-interval,
// default 50 ms) in its round, backing off while the endpoint fails (see
// Back-off). A round is up to RoundSize (default 4) endpoints scraped
// together on one timer, ceil(n/RoundSize) rounds spread over the interval
// (phases 0, 1/2, 1/4, 3/4, 1/8… of it): the wake-ups of a scrape (the
// scraper's threads, the model server's, a cross-CPU wake-up for the one
// write) cost more than the scrape, and a round pays them once for all its
// members, while a small round keeps the burst that requests wait behind
// short (rounds.go has the measurements). A scrape that takes longer than
// the interval is followed by the next at once. A semaphore bounds
// simultaneous scrapes (MaxConcurrency). Each scrape has a Timeout
// (default 1 s) covering the whole body; bodies are streamed, bounded by
// MaxBodyBytes (default 16 MiB) and never buffered whole. The URL is
// scheme://address:metricsPort/path, with the scheme and path of the
// metrics-data-source unless the endpoint sets its own metrics port or
// path. The engine mapping is the endpoint's EndpointSpec.Engine when the
// extractor knows it, else the extractor's choice from the endpoint's
// labels (engine label, then the default engine).
//
// Scraping is the EPP's largest background cost (100 endpoints at 50 ms
// are 2000 scrapes a second), so each one does as little as it can. With
// the metrics-data-source's nameFilter (the default) the URL carries one
// name[] query parameter per family the mapping reads, which Prometheus
// client_python (vLLM, SGLang, trtllm-serve) honours with a body of a few
// lines instead of every histogram; a server that ignores it is read as
// before. A server that answers the filtered request without the
// mapping's metrics, or without one of its load metrics, although its
// whole body has them (client_python with a multiprocess collector, as
// SGLang and multi-process vLLM run, restricts to nothing) is asked again
// whole in the same scrape, and whole from then on, until its target or
// the configuration changes; this is logged once. Only the lines of those
// families are parsed, and a scrape whose lines are byte for byte those of
// the endpoint's last scrape returns the last answer without parsing (an
// idle server's gauges do not move).
//
// Each worker keeps one HTTP/1.1 connection to its endpoint open (TLS with
// the https scheme, verification as insecureSkipVerify says) and writes
// the request and reads the answer in its own goroutine, with net/http's
// request and response parsing but not its Transport, whose hand-offs
// between goroutines cost as much as the scrape. A connection the server
// closed while it sat idle is redialled once without counting a failure;
// one whose answer was not a 200, was not read to its end or was followed
// by stray bytes is closed. Response headers are bounded (1 MiB),
// informational (1xx) answers skipped. The request asks for no compression
// (a gzipped answer is read all the same) and says User-Agent:
// switchyard-epp. Redirects to the same scheme, host and port are followed
// (up to 3, logged once: the metrics path should be the target), others
// are an http_status failure. No proxy is used.
//
// Run also runs the store's publisher (Store.RunPublisher) with a gap of a
// fifth of the interval, so every result reaches the request path within
// one interval, and a whole round of scrapes is published a few times, not
// once per endpoint.
//
// # Failures
//
// A failed scrape — timeout, connection refused or broken (connect, which
// also counts an answer that is not HTTP: a malformed status line or
// header, a header over 1 MiB, more than 5 informational answers), a
// status other than 200, an oversized or malformed body, or no metric of
// the mapping
// present — is reported to the store, which marks the endpoint stale at
// the next publish. Each failure increments
// switchyard_scrape_errors_total{reason}; logs are written only on
// transitions: the first failure (error), a change of reason (V(1)) and
// the recovery (info). A scrape that reads some metrics but not others (a
// vLLM server without LoRA has no vllm:lora_requests_info) succeeds; the
// missing metrics are zero, logged at V(1) when the set of problems
// changes, and shown in the endpoint's ScrapeStatus.Warning.
//
// # Unknown load
//
// The load metrics — waiting queue, running requests, KV-cache usage —
// are another matter: a value that cannot be read must never look like an
// idle server. When the mapping configures one of them and the server
// reports it as NaN, ±Inf or negative, with the wrong type, or not at all,
// ParseMetrics returns a *LoadUnknownError and the scraper reports
// ScrapeResult.LoadUnknown ("vllm:num_requests_waiting is NaN"): the
// store treats the endpoint as stale, like a failed scrape, keeps the
// scrape's values out of the snapshot, and ScrapeStatus.LoadUnknown and
// /debug/endpoints (loadUnknown, ready false) say why. Each unreadable
// value increments switchyard_scrape_invalid_values_total{metric};
// switchyard_endpoints_load_unknown counts such endpoints. It is not a
// scrape error (switchyard_scrape_errors_total does not count it). The
// state is logged on transitions: entering it (error), a new kind of
// problem (V(1); the same problem with another value is not logged), and
// leaving it (info). KV-cache usage above 1 reads as 1 and counts above
// MaxInt32 as MaxInt32: pessimistic values, used as they are. If every
// endpoint is stale or has an unknown load the pool fails open (see
// package datastore), so a broken endpoint gets requests only when no
// healthy endpoint exists.
//
// # Back-off
//
// A worker whose scrapes fail — any error above, or an unknown load —
// backs off: after n consecutive such scrapes the next one comes
// Interval×2^(n-1) after the last one ended, capped at MaxBackoff (default
// 5 s), less a random jitter of up to a quarter so that endpoints that
// failed together spread out. A failing endpoint therefore costs about one
// request (and up to MaxBodyBytes read) per MaxBackoff instead of one per
// Interval. The first good scrape returns to one scrape per Interval, so a
// recovered endpoint is routed to again within MaxBackoff + Interval. A
// newly added endpoint starts at Interval, and a configuration change
// (SetConfig) or a change of an endpoint's metrics address, path, engine
// or labels ends the back-off: the next scrape comes within one interval.
//
// # Metrics
//
//	switchyard_scrape_errors_total{reason}          counter; reason is one of timeout,
//	                                                connect, http_status, body_too_large,
//	                                                parse, missing_metrics
//	switchyard_scrape_invalid_values_total{metric}  counter of unreadable load values;
//	                                                metric is one of queue, running, kv_cache
//	switchyard_scrape_duration_seconds              histogram of every scrape
//	switchyard_endpoints_stale                      gauge, endpoints without fresh metrics
//	switchyard_endpoints_load_unknown               gauge, endpoints whose load is unknown
//	                                                (counted as stale too)
//	switchyard_scrape_targets                       gauge, endpoints being scraped
//
// ParseMetrics is the pure mapping of one body to scheduling.Metrics; see
// its documentation for GIE's selection rules.
package scrape
