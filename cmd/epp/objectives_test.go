package main

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"k8s.io/client-go/rest"

	"github.com/switchyard-ai/switchyard/pkg/server"
)

// TestObjectiveFlagsApply: the file wins; Kubernetes mode with a pool gets
// the InferenceObjective watch unless it is turned off; the selector mode
// (no pool) and standalone mode get none.
func TestObjectiveFlagsApply(t *testing.T) {
	k := &kubeImports{config: &rest.Config{Host: "https://127.0.0.1:1"}, namespace: "ns", pool: "pool"}
	for _, tc := range []struct {
		name      string
		flags     objectiveFlags
		kube      *kubeImports
		wantFile  string
		wantWatch bool
	}{
		{"file", objectiveFlags{file: "o.yaml", watch: true}, k, "o.yaml", false},
		{"watch", objectiveFlags{watch: true}, k, "", true},
		{"watch off", objectiveFlags{watch: false}, k, "", false},
		{"selector mode", objectiveFlags{watch: true}, &kubeImports{config: k.config, namespace: "ns"}, "", false},
		{"standalone", objectiveFlags{watch: true}, nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg server.Config
			tc.flags.apply(&cfg, tc.kube, "inference.networking.k8s.io", logr.Discard())
			assert.Equal(t, tc.wantFile, cfg.ObjectivesFile)
			assert.Equal(t, tc.wantWatch, cfg.Objectives != nil)
		})
	}
	assert.Equal(t, []string{"--watch-inference-objectives needs Kubernetes mode with --pool-name (objectives reference their pool)"},
		(&objectiveFlags{watch: true}).errors(map[string]bool{"watch-inference-objectives": true}, false))
	assert.Empty(t, (&objectiveFlags{watch: true}).errors(map[string]bool{}, false), "the default needs no Kubernetes mode")
}
