package scheduling_test

import (
	"context"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Each instance handle has its own context, a child of the shared
// handle's, ended by Cancel; everything else is the shared handle's.
func TestInstanceHandle(t *testing.T) {
	t.Parallel()
	parent, cancelParent := context.WithCancel(t.Context())
	defer cancelParent()
	h := scheduling.NewHandle(scheduling.HandleOptions{Context: parent, Seed: 7, APIVersion: scheduling.APIVersionLLMD})
	a, b := h.ForInstance(), h.ForInstance()
	if a.Context() == b.Context() || a.Context() == parent {
		t.Fatal("instances share a context")
	}
	a.Cancel()
	a.Cancel() // twice is fine
	if a.Context().Err() == nil {
		t.Error("Cancel did not end the instance's context")
	}
	if b.Context().Err() != nil || parent.Err() != nil {
		t.Error("Cancel ended another context")
	}
	if a.Registerer() != h.Registerer() || a.APIVersion() != scheduling.APIVersionLLMD {
		t.Error("an instance handle does not delegate to the shared handle")
	}
	if a.Rand("x").Uint64() != h.Rand("x").Uint64() {
		t.Error("Rand differs from the shared handle's")
	}
	cancelParent()
	if b.Context().Err() == nil {
		t.Error("an instance context outlives its parent")
	}
}

// A sealed handle finds no instance, so that a handle a plugin keeps does
// not keep its configuration's other instances alive; parameters stay.
func TestSealForgetsInstances(t *testing.T) {
	t.Parallel()
	h := scheduling.NewHandle(scheduling.HandleOptions{})
	p := &fakeProducer{name: "p"}
	h.AddPlugin("p", p)
	h.RecordParams("p", 3)
	if got, ok := h.ForInstance().Plugin("p"); !ok || got != p {
		t.Fatal("Plugin does not find an added instance")
	}
	h.Seal()
	if _, ok := h.Plugin("p"); ok {
		t.Error("a sealed handle still finds instances")
	}
	h.AddPlugin("q", p)
	if _, ok := h.Plugin("q"); ok {
		t.Error("AddPlugin after Seal took effect")
	}
	if v, ok := h.Params("p"); !ok || v != 3 {
		t.Errorf("Params after Seal = %v, %v", v, ok)
	}
}
