package config_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	st "github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// defaultWithStrategyPicker is config/default.yaml with its max-score-picker
// replaced by a strategy-picker of the given strategy.
func defaultWithStrategyPicker(strategy string) []byte {
	doc := strings.Replace(string(configfiles.Default), "- type: max-score-picker", "- type: strategy-picker\n  parameters:\n    strategy: "+strategy, 1)
	return []byte(strings.Replace(doc, "pluginRef: max-score-picker", "pluginRef: strategy-picker", 1))
}

// BenchmarkStrategyPickerDefaultProfile schedules requests through
// config/default.yaml's scorers (queue 2, KV cache 2, prefix 3) with a
// strategy-picker, as BenchmarkDefaultProfile does with the max-score
// picker: data producers, admission, the profile, PreRequest. With
// "scorers" the endpoints' loads differ, so one endpoint usually scores
// clearly highest; with "strategy" every endpoint looks the same and the
// strategy decides on every request. The bound: under 100 µs per
// request at 1000 endpoints.
func BenchmarkStrategyPickerDefaultProfile(b *testing.B) {
	for _, strategy := range []string{"RoundRobin", "LeastBusy", "ConsistentHash"} {
		for _, decides := range []string{"scorers", "strategy"} {
			for _, n := range []int{10, 100, 1000} {
				b.Run(fmt.Sprintf("%s/%s/endpoints=%d", strategy, decides, n), func(b *testing.B) {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					reg := prometheus.NewRegistry()
					loaded, err := config.Load(defaultWithStrategyPicker(strategy), config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: reg, Seed: 1})
					if err != nil {
						b.Fatal(err)
					}
					eps := st.Endpoints(n, func(i int, e *st.EndpointBuilder) {
						e.Load(st.NewFakeLoad(int64(i%3), time.Duration(100+i%9)*time.Millisecond))
						if decides == "scorers" {
							e.Queue(i % 7).KVCache(float64(i%10) / 10)
						}
					})
					prompts := make([][]byte, 64)
					for g := range prompts {
						prompts[g] = append(prompt("group-"+strconv.Itoa(g), 2048), prompt("tail-"+strconv.Itoa(g), 2048)...)
					}
					if decides == "scorers" {
						for g := range prompts {
							req := &scheduling.Request{ID: "warm", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: prompts[g]}}
							if _, err := loaded.Scheduler.Process(ctx, req, eps); err != nil {
								b.Fatal(err)
							}
						}
					}
					// The self-check below counts the measured picks only:
					// the warm-up's (all ties, so the strategy's) are taken
					// off.
					warm := decisions(b, reg)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; b.Loop(); i++ {
						text := prompts[i%64]
						if decides == "strategy" {
							text = prompt("fresh-"+strconv.Itoa(i), 64) // no prefix hits: all endpoints tie
						}
						req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: text}}
						if _, err := loaded.Scheduler.Process(ctx, req, eps); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					// The case measured what it says: most picks were decided
					// by the scorers, or by the strategy.
					by := decisions(b, reg)
					for k, v := range warm {
						by[k] -= v
					}
					if by[decides] < 9*by[map[string]string{"scorers": "strategy", "strategy": "scorers"}[decides]] {
						b.Fatalf("decisions: %v, want most by the %s", by, decides)
					}
				})
			}
		}
	}
}

// decisions returns the strategy-picker's decision counts by decided_by.
func decisions(tb testing.TB, reg prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_strategy_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "decided_by" {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
