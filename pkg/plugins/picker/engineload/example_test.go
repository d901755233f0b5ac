package engineload_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/engineload"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func load(t *testing.T, doc string) (*config.Loaded, error) {
	t.Helper()
	return config.Load([]byte(doc), config.Options{Registry: plugins.InTree(), Context: context.Background(), Seed: 1})
}

// TestREADMEExample loads the README's example with the real loader: the
// loader builds the base strategy as "<name>/base" and the picker finds it.
func TestREADMEExample(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "```yaml\n") + len("```yaml\n")
	end := strings.Index(s[start:], "```")
	loaded, err := load(t, s[start:start+end])
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	p, ok := loaded.Plugins[engineload.Type].(*engineload.Picker)
	if !ok {
		t.Fatalf("plugins = %v", loaded.Plugins)
	}
	if p.BaseStrategy() != "WeightedRoundRobin" || p.BasePicker().TypedName() != (scheduling.TypedName{Type: "weighted-round-robin-picker", Name: "engine-load-picker/base"}) {
		t.Errorf("base = %s %v", p.BaseStrategy(), p.BasePicker().TypedName())
	}
}

// TestLoaderBuildsTheBase checks the loader integration: default base,
// base parameters checked strictly under this picker's field, EngineLoad
// refused as a base, and EngineLoad as a strategy-picker's strategy.
func TestLoaderBuildsTheBase(t *testing.T) {
	const head = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
	const tail = "schedulingProfiles:\n  - name: default\n    plugins:\n      - pluginRef: p\n"
	t.Run("default base", func(t *testing.T) {
		loaded, err := load(t, head+"  - name: p\n    type: engine-load-picker\n    parameters:\n      maxNumOfEndpoints: 2\n"+tail)
		if err != nil {
			t.Fatal(err)
		}
		defer loaded.Close()
		p := loaded.Plugins["p"].(*engineload.Picker)
		if p.BaseStrategy() != "RoundRobin" || p.BasePicker().TypedName().Type != "round-robin-picker" {
			t.Errorf("base = %s %v", p.BaseStrategy(), p.BasePicker().TypedName())
		}
		if m, ok := p.BasePicker().(interface{ MaxEndpoints() int }); !ok || m.MaxEndpoints() != 2 {
			t.Error("the base does not get the picker's maxNumOfEndpoints")
		}
	})
	t.Run("base parameters", func(t *testing.T) {
		loaded, err := load(t, head+"  - name: p\n    type: engine-load-picker\n    parameters:\n      baseStrategy: consistent_hash\n      baseStrategyParameters:\n        virtualNodes: 7\n"+tail)
		if err != nil {
			t.Fatal(err)
		}
		loaded.Close()
		_, err = load(t, head+"  - name: p\n    type: engine-load-picker\n    parameters:\n      baseStrategy: ConsistentHash\n      baseStrategyParameters:\n        virtualNodez: 7\n"+tail)
		if err == nil || !strings.Contains(err.Error(), "baseStrategyParameters") || !strings.Contains(err.Error(), `unknown field "virtualNodez"`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("EngineLoad base refused", func(t *testing.T) {
		_, err := load(t, head+"  - name: p\n    type: engine-load-picker\n    parameters:\n      baseStrategy: EngineLoad\n"+tail)
		if err == nil || !strings.Contains(err.Error(), "baseStrategy: must not be EngineLoad") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("as a strategy", func(t *testing.T) {
		loaded, err := load(t, head+"  - name: p\n    type: strategy-picker\n    parameters:\n      strategy: EngineLoad\n      strategyParameters:\n        baseStrategy: LeastBusy\n"+tail)
		if err != nil {
			t.Fatal(err)
		}
		defer loaded.Close()
		sp := loaded.Plugins["p"].(interface{ StrategyPicker() scheduling.Picker })
		el, ok := sp.StrategyPicker().(*engineload.Picker)
		if !ok || el.BasePicker().TypedName().Type != "least-busy-picker" {
			t.Errorf("strategy = %T", sp.StrategyPicker())
		}
	})
}
