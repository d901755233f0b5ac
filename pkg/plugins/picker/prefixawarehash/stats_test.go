package prefixawarehash

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestC51_RoutingStats: the admin API's accessor reports the instance's
// own picks by strategy, per backend, and the cardinality estimate.
func TestC51_RoutingStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := time.Unix(1_700_000_000, 0)
	pk, err := newWithClock("p", DefaultParams(), handleWith(reg, logr.Discard()), func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	other, err := newWithClock("q", DefaultParams(), handleWith(reg, logr.Discard()), func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	scored, _ := loaded(3)
	for i := range 30 {
		pk.Pick(t.Context(), chat("m", fmt.Sprintf("s%d", i%10), "u"), scored)
	}
	pk.Pick(t.Context(), &scheduling.Request{Model: "m"}, scored)
	other.Pick(t.Context(), &scheduling.Request{Model: "m"}, scored)
	st := pk.RoutingStats()
	if st.Picker != "p" || !st.Enabled || st.VirtualNodes != DefaultParams().VirtualNodes {
		t.Errorf("stats = %+v", st)
	}
	if st.Requests[StrategyPrefixHash] != 30 || st.Requests[StrategyModelHashFallback] != 1 || st.Requests[StrategyBoundedOverflow] != 0 {
		t.Errorf("requests = %v", st.Requests)
	}
	var total uint64
	for _, n := range st.Backends {
		total += n
	}
	if total != 31 {
		t.Errorf("backends = %v, want 31 in all (q's pick not counted)", st.Backends)
	}
	if st.PrefixCardinality < 9 || st.PrefixCardinality > 11 {
		t.Errorf("cardinality = %v, want about 10", st.PrefixCardinality)
	}
}
