package prefixawarehash_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestC16_FallbackAgreesWithConsistentHash: the fallback is model-name
// consistent hashing: with prefix routing disabled the picker chooses, for
// every model, what the consistent-hash-picker chooses over the same
// candidates (both built from the in-tree registry, as a configuration
// would build them), fallbacks included.
func TestC16_FallbackAgreesWithConsistentHash(t *testing.T) {
	reg := plugins.InTree()
	build := func(typ, params string) scheduling.Picker {
		r, ok := reg.Lookup(typ)
		if !ok {
			t.Fatalf("no %s", typ)
		}
		p, err := r.Factory(typ, json.RawMessage(params), schedulingtest.NewHandle(t))
		if err != nil {
			t.Fatal(err)
		}
		return p.(scheduling.Picker)
	}
	ch := build("consistent-hash-picker", `{"maxNumOfEndpoints": 2}`)
	pah := build("prefix-aware-hash-picker", `{"enabled": false, "maxNumOfEndpoints": 2}`)
	eps := schedulingtest.Endpoints(17, nil)
	scored := make([]scheduling.ScoredEndpoint, len(eps))
	for i, e := range eps {
		scored[i] = scheduling.ScoredEndpoint{Endpoint: e}
	}
	for i := range 200 {
		req := &scheduling.Request{Model: fmt.Sprintf("model-%d", i), Prompt: scheduling.Prompt{Messages: []scheduling.Message{{Role: "system", Content: "s"}}}}
		a := schedulingtest.Names(ch.Pick(t.Context(), req, scored).Targets)
		b := schedulingtest.Names(pah.Pick(t.Context(), req, scored).Targets)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("model-%d: consistent-hash-picker %v, prefix-aware-hash-picker fallback %v", i, a, b)
		}
	}
}
