package prefix

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// sizeSeries returns the prefix_indexer_size values by plugin_name.
func sizeSeries(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "inference_extension_prefix_indexer_size" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// Close drops the index and, without a successor, the instance's size
// series; with one, the series stays for the successor, which keeps
// updating it. A closed producer keeps answering requests of the old
// configuration: no hits, nothing recorded.
func TestProducerClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1})
	build := func(name string) *Producer {
		pl, err := ProducerRegistration.Factory(name, json.RawMessage(`{"autoTune": false}`), h)
		if err != nil {
			t.Fatal(err)
		}
		return pl.(*Producer)
	}
	eps := schedulingtest.Endpoints(2, nil)
	text := promptText(blocks("p", 4)...)

	gone, old := build("gone"), build("kept")
	route(gone, newRequest("m", text), eps, eps[0])
	route(old, newRequest("m", text), eps, eps[0])
	if got := sizeSeries(t, reg); got["gone"] != 4 || got["kept"] != 4 {
		t.Fatalf("sizes before Close = %v", got)
	}

	gone.Close(scheduling.CloseInfo{})
	if _, ok := sizeSeries(t, reg)["gone"]; ok {
		t.Error("Close without a successor left the size series")
	}
	if gone.IndexSize() != 0 {
		t.Errorf("index size after Close = %d, want 0", gone.IndexSize())
	}
	// A request of the old configuration still running.
	if pm := route(gone, newRequest("m", text), eps, eps[0]); pm.HitCount() != 0 {
		t.Errorf("a closed producer reports %d hits", pm.HitCount())
	}
	if gone.IndexSize() != 0 || gone.Prune(func(string) bool { return false }) != 0 {
		t.Error("a closed producer grew its index")
	}
	if _, ok := sizeSeries(t, reg)["gone"]; ok {
		t.Error("a closed producer brought its series back")
	}

	// Rebuilt under the same name: the old one closes with a successor.
	next := build("kept")
	old.Close(scheduling.CloseInfo{Successor: true})
	route(old, newRequest("m", text), eps, eps[0])
	route(next, newRequest("m", promptText(blocks("q", 2)...)), eps, eps[0])
	if got := sizeSeries(t, reg)["kept"]; got != 2 {
		t.Errorf("successor's size = %v, want 2 (its own index)", got)
	}
}
