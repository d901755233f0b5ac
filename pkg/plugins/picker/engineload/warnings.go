package engineload

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// DataLayer is what a loaded configuration's data layer collects, as far
// as the engine-load-picker is concerned. The host fills it from the
// configuration (pkg/config's Loaded.DataSources and their extractors).
type DataLayer struct {
	// Scrapes is true when model-server metrics are scraped at all: a data
	// source with an extractor, or the built-in default one.
	Scrapes bool
	// Engines are the engine mappings the extractors apply (the
	// core-metrics-extractor's vllm, sglang, ... and configured ones).
	Engines []EngineMetrics
}

// EngineMetrics says which of the metrics the picker reads an engine
// mapping extracts.
type EngineMetrics struct {
	// Name is the engine's name.
	Name string
	// WaitingQueue: the mapping reads the waiting-queue length
	// (waiting_requests).
	WaitingQueue bool
	// KVCache: the mapping reads the KV-cache usage (kv_cache_usage).
	KVCache bool
}

// MetricsWarnings returns the `epp validate` and start-up warnings for an
// engine-load-picker instance named picker (C-19: EngineLoad needs engine
// metrics), none when the data layer scrapes the waiting queue and the KV
// usage for every engine. Engines are listed in name order.
func MetricsWarnings(picker string, dl DataLayer) []string {
	if !dl.Scrapes {
		return []string{fmt.Sprintf("%s %q reads waiting_requests and kv_cache_usage from scraped engine metrics, but the configuration scrapes none: every pick falls back to its base strategy (%s); configure a metrics data source with a core-metrics-extractor, or leave dataLayer out for the default one",
			Type, picker, ReasonStaleFallback)}
	}
	var noWaiting, noKV []string
	for _, e := range dl.Engines {
		if !e.WaitingQueue {
			noWaiting = append(noWaiting, e.Name)
		}
		if !e.KVCache {
			noKV = append(noKV, e.Name)
		}
	}
	slices.Sort(noWaiting)
	slices.Sort(noKV)
	var out []string
	if len(noWaiting) > 0 {
		out = append(out, fmt.Sprintf("%s %q: engine mappings %s read no waiting-queue metric: their endpoints report 0 waiting and win whenever the deadband opens; set queuedRequestsSpec in their engineConfigs",
			Type, picker, strings.Join(noWaiting, ", ")))
	}
	if len(noKV) > 0 {
		out = append(out, fmt.Sprintf("%s %q: engine mappings %s read no KV-cache metric: equal waiting queues are not told apart by KV-cache usage; set kvUsageSpec in their engineConfigs",
			Type, picker, strings.Join(noKV, ", ")))
	}
	return out
}

// ScrapeIntervalWarning is the configuration warning of an
// engine-load-picker instance whose scrapeInterval differs from the
// host's metrics scrape interval (--refresh-metrics-interval): its
// freshness horizon is then not the number of scrapes it says. The
// configuration loader prefixes it with the instance's label.
func ScrapeIntervalWarning(configured, host time.Duration, intervals int) string {
	return fmt.Sprintf("scrapeInterval %s differs from the EPP's metrics scrape interval %s (--refresh-metrics-interval): metrics count as fresh for %d × %s = %s, not %d scrapes; leave scrapeInterval out to follow the EPP's interval",
		configured, host, intervals, configured, configured*time.Duration(intervals), intervals)
}
