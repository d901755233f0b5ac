package config_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// A reload keeps the instances whose name, type and effective parameters
// did not change (with their state) and builds the others afresh.
func TestReloadKeepsUnchangedPlugins(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	opts := config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: reg, Seed: 1}
	first, err := config.Load(configfiles.Default, opts)
	require.NoError(t, err)
	require.Empty(t, first.Kept)

	tests := []struct {
		name    string
		doc     string
		kept    []string
		rebuilt []string
	}{
		{
			name: "same file keeps every instance",
			doc:  string(configfiles.Default),
			kept: []string{"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "max-score-picker", "single-profile-handler", "approx-prefix-cache-producer"},
		},
		{
			name: "changed weight keeps every instance",
			doc:  strings.Replace(string(configfiles.Default), "weight: 3", "weight: 5", 1),
			kept: []string{"prefix-cache-scorer", "approx-prefix-cache-producer", "queue-scorer"},
		},
		{
			name:    "changed parameters rebuild that instance",
			doc:     strings.Replace(string(configfiles.Default), "- type: max-score-picker", "- type: max-score-picker\n  parameters:\n    maxNumOfEndpoints: 2", 1),
			kept:    []string{"queue-scorer", "approx-prefix-cache-producer"},
			rebuilt: []string{"max-score-picker"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			o.Previous = first
			next, err := config.Load([]byte(tc.doc), o)
			require.NoError(t, err)
			for _, name := range tc.kept {
				require.Contains(t, next.Kept, name)
				require.Same(t, first.Plugins[name], next.Plugins[name], name)
			}
			for _, name := range tc.rebuilt {
				require.False(t, slices.Contains(next.Kept, name), name)
				require.NotSame(t, first.Plugins[name], next.Plugins[name], name)
			}
		})
	}
}
