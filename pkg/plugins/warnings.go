package plugins

import (
	"sort"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/engineload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/leastcost"
	engineloadscorer "github.com/switchyard-ai/switchyard/pkg/plugins/scorer/engineload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/usageweight"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// ConfigWarnings are the selection strategies' warnings that depend on the
// configuration alone (C-19: EngineLoad without engine metrics; C-34: an
// engine-load-scorer weight above the other scorers' weights). epp
// validate prints them; the server logs them at start-up and on reload.
// The warnings the loader itself records (Loaded.Warnings, such as
// PrefixAwareHash with prefix routing disabled) are not repeated.
func ConfigWarnings(l *config.Loaded) []string {
	var out []string
	for _, name := range sortedNames(l) {
		if _, ok := l.Plugins[name].(*engineload.Picker); ok {
			out = append(out, engineload.MetricsWarnings(name, dataLayer(l))...)
		}
	}
	if l.Scheduler != nil {
		// C-34: an engine-load-scorer weight that lifts its cap.
		out = append(out, engineloadscorer.WeightWarnings(l.Scheduler.Profiles())...)
	}
	return out
}

// EndpointWarnings are the warnings that depend on the endpoints as well
// (C-26: LeastCost with fewer than two priced replicas of a model served
// by two or more endpoints). epp validate prints them when given an
// endpoints file; the server logs them when the configuration or the
// endpoint set changes.
func EndpointWarnings(l *config.Loaded, endpoints []*scheduling.Endpoint) []string {
	var out []string
	for _, name := range sortedNames(l) {
		if p, ok := l.Plugins[name].(*leastcost.Picker); ok {
			out = append(out, leastcost.PricingWarnings(endpoints, leastcost.Params{Catalog: p.Catalog()})...)
		}
	}
	on, quota := usageWeightInProfiles(l)
	out = append(out, usageweight.DeclarationWarnings(on, quota, endpoints)...)
	return out
}

// usageWeightInProfiles returns the usage-weight-scorer instances that a
// scheduling profile references with a positive weight (the term is on,
// C-39) and whether one of them observes rate-limit headers.
func usageWeightInProfiles(l *config.Loaded) (on []string, quotaAware bool) {
	if l.Config == nil {
		return nil, false
	}
	seen := map[string]bool{}
	for _, prof := range l.Config.SchedulingProfiles {
		for _, ref := range prof.Plugins {
			s, ok := l.Plugins[ref.PluginRef].(*usageweight.Scorer)
			if !ok || seen[ref.PluginRef] || (ref.Weight != nil && !(*ref.Weight > 0)) {
				continue
			}
			seen[ref.PluginRef] = true
			on = append(on, ref.PluginRef)
			quotaAware = quotaAware || s.QuotaAware()
		}
	}
	sort.Strings(on)
	return on, quotaAware
}

// dataLayer describes what the configuration's data layer scrapes, for
// engineload.MetricsWarnings.
func dataLayer(l *config.Loaded) engineload.DataLayer {
	for _, b := range l.DataSources {
		for _, x := range b.Extractors {
			cm, ok := x.(*coremetrics.Extractor)
			if !ok {
				continue
			}
			dl := engineload.DataLayer{Scrapes: true}
			engines := cm.Engines()
			names := make([]string, 0, len(engines))
			for n := range engines {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				m := engines[n]
				dl.Engines = append(dl.Engines, engineload.EngineMetrics{Name: n, WaitingQueue: m.QueuedRequests != nil, KVCache: m.KVUsage != nil || m.KVUsageFallback != nil})
			}
			return dl
		}
	}
	return engineload.DataLayer{}
}

func sortedNames(l *config.Loaded) []string {
	names := make([]string, 0, len(l.Plugins))
	for n := range l.Plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
