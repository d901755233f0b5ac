package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	st "github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the no-override test")

// noOverrideGolden holds what the shipped default configuration and the
// GIE v1.5 configurations built and picked before selection strategies
// existed (issue 10); see TestNoOverrideBehavesAsBefore.
const noOverrideGolden = "testdata/no_override.golden.json"

// behaviour is what a configuration builds and how it schedules a fixed,
// seeded request sequence.
type behaviour struct {
	// Plugins are the instances, "name (type)", sorted.
	Plugins []string `json:"plugins"`
	// Profiles are each profile's filters, weighted scorers and picker.
	Profiles map[string][]string `json:"profiles"`
	// Picks are, per request, the primary profile and every profile's
	// targets (or its error).
	Picks []string `json:"picks"`
}

// observe loads doc and schedules 64 requests over 8 endpoints whose
// queues, KV usage and LoRA adapters change from request to request, with
// prompts that share prefixes.
func observe(t *testing.T, doc []byte, opts config.Options) behaviour {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts.Registry = plugins.InTree()
	opts.Context, opts.Registerer, opts.Seed = ctx, prometheus.NewRegistry(), 1
	loaded, err := config.Load(doc, opts)
	require.NoError(t, err)
	defer loaded.Close()
	var b behaviour
	for name, p := range loaded.Plugins {
		b.Plugins = append(b.Plugins, name+" ("+p.TypedName().Type+")")
	}
	sort.Strings(b.Plugins)
	b.Profiles = map[string][]string{}
	for _, prof := range loaded.Scheduler.Profiles() {
		var parts []string
		for _, f := range prof.Filters() {
			parts = append(parts, "filter "+f.TypedName().String())
		}
		for _, s := range prof.Scorers() {
			parts = append(parts, fmt.Sprintf("scorer %s ×%g", s.Scorer.TypedName(), s.Weight))
		}
		parts = append(parts, "picker "+prof.Picker().TypedName().String())
		b.Profiles[prof.Name()] = parts
	}
	for i := range 64 {
		// A new snapshot per request, as scrapes publish: the loads move.
		eps := st.Endpoints(8, func(j int, e *st.EndpointBuilder) {
			e.Queue((i*7 + j*3) % 5).KVCache(float64((i+j)%5) / 5).Running(j % 3).MaxModels(2)
			if (i+j)%3 == 0 {
				e.ActiveModels("lora-a")
			}
			e.Label("llm-d.ai/role", []string{"prefill", "decode", "both"}[j%3])
		})
		model := "m"
		if i%4 == 1 {
			model = "lora-a"
		}
		req := &scheduling.Request{
			ID: fmt.Sprintf("r%d", i), Model: model, TargetModel: model,
			Prompt:  scheduling.Prompt{Text: append(prompt(fmt.Sprintf("group-%d", i%5), 1024), prompt(fmt.Sprintf("tail-%d", i), 256)...)},
			Headers: map[string]string{}, PromptTokens: 320, BodyBytes: 1300,
		}
		res, err := loaded.Scheduler.Process(ctx, req, eps)
		if err != nil {
			var refused *scheduling.RefusalError
			if errors.As(err, &refused) {
				b.Picks = append(b.Picks, "refused "+refused.Refusal.Reason)
			} else {
				b.Picks = append(b.Picks, "error "+err.Error())
			}
			continue
		}
		names := make([]string, 0, len(res.ProfileResults))
		for name, pr := range res.ProfileResults {
			if pr == nil {
				names = append(names, name+"=failed")
				continue
			}
			names = append(names, name+"="+strings.Join(st.Names(pr.Targets), ","))
		}
		sort.Strings(names)
		b.Picks = append(b.Picks, res.PrimaryProfile+": "+strings.Join(names, " "))
		// Every other request completes, so in-flight counts vary.
		if i%2 == 0 {
			loaded.Scheduler.ResponseComplete(ctx, req, &scheduling.Response{StatusCode: 200, EndOfStream: true}, res.Targets()[0])
		}
	}
	return b
}

// noOverrideConfigs returns the shipped default configuration and, unless
// -short, every GIE v1.5 configuration whose plugins Switchyard has.
func noOverrideConfigs(t *testing.T) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{"config/default.yaml": configfiles.Default}
	if testing.Short() {
		return docs
	}
	reg := plugins.InTree()
	for _, c := range gieConfigs(t, downloadGIE(t)) {
		missing := false
		for _, typ := range pluginTypes(c.doc) {
			if _, ok := reg.Lookup(typ); !ok {
				missing = true
			}
		}
		if !missing {
			docs["gie-"+gieVersion+"/"+c.where] = c.doc
		}
	}
	return docs
}

// TestNoOverrideBehavesAsBefore: with no --selection-strategy, no
// SWITCHYARD_SELECTION_STRATEGY and no strategy-picker, the default
// configuration and every GIE v1.5 configuration build the same plugins
// and profiles and pick the same endpoints, request for request, as
// before selection strategies existed. The golden file was written by
// this test on the commit before them (go test -run
// TestNoOverrideBehavesAsBefore -update).
func TestNoOverrideBehavesAsBefore(t *testing.T) {
	docs := noOverrideConfigs(t)
	got := map[string]behaviour{}
	for name, doc := range docs {
		b := observe(t, doc, config.Options{})
		require.Equal(t, b, observe(t, doc, config.Options{}), "%s: a seeded run is deterministic", name)
		got[name] = b
	}
	path := filepath.FromSlash(noOverrideGolden)
	if *updateGolden {
		out, err := json.MarshalIndent(got, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
		return
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var want map[string]behaviour
	require.NoError(t, json.Unmarshal(data, &want))
	if !testing.Short() {
		require.Len(t, got, len(want), "the same configurations load")
	}
	for name, b := range got {
		w, ok := want[name]
		require.True(t, ok, "%s is not in %s", name, noOverrideGolden)
		if d := cmp.Diff(w, b); d != "" {
			t.Errorf("%s behaves differently (-before +now):\n%s", name, d)
		}
	}
}
