package prefixawarehash

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// lint fails on every promlint problem of the metrics gathered from reg.
func lint(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) == 0 {
		t.Fatal("no metrics gathered")
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	pk, err := New("p", DefaultParams(), handleWith(reg, logr.Discard()))
	if err != nil {
		t.Fatal(err)
	}
	scored, _ := loaded(3)
	pk.Pick(t.Context(), chat("m", "s", "u"), scored)
	lint(t, reg)
}
