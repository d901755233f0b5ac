package server

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/multisite/learner"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// TestG82_TuningOrderNamesExposedMetrics: the README's tuning order (G-82)
// is ceiling, rho, selections, shedding, each against the real value it
// tracks, and every metric it tells an operator to watch is one the
// learner or the site stage exposes.
func TestG82_TuningOrderNamesExposedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(raw), "### What to watch, in this order (G-82)")
	if !ok {
		t.Fatal("README has no G-82 section")
	}
	sec, _, _ = strings.Cut(sec, "\n### ")
	var steps []string
	for _, m := range regexp.MustCompile(`(?m)^\d+\. \*\*([A-Za-z]+)\*\*`).FindAllStringSubmatch(sec, -1) {
		steps = append(steps, m[1])
	}
	if want := []string{"Ceiling", "Rho", "Selections", "Shedding"}; strings.Join(steps, ",") != strings.Join(want, ",") {
		t.Fatalf("tuning order %v, want %v (G-82)", steps, want)
	}
	for _, tracks := range []string{"running plateau", "engine queue", "two_choices", "429"} {
		if !strings.Contains(sec, tracks) {
			t.Errorf("the tuning order does not say what a metric tracks: %q", tracks)
		}
	}

	reg := prometheus.NewRegistry()
	if _, err := learner.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := sitestage.New(sitestage.Options{Holder: &sitestate.Holder{}, LocalSite: "a", Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, mf := range mfs {
		exposed[mf.GetName()] = true
	}
	// Vectors without a child yet gather nothing: name the learner's too.
	for _, n := range []string{learner.MetricCeiling, learner.MetricCeilingSoft, learner.MetricCeilingHard, learner.MetricRho,
		learner.MetricRhoCounted, learner.MetricRhoReported, learner.MetricWeight, learner.MetricShedding} {
		exposed[n] = true
	}
	names := regexp.MustCompile("`(grid_route_[a-z_]+)").FindAllStringSubmatch(sec, -1)
	if len(names) < 4 {
		t.Fatalf("the tuning order names %d metrics", len(names))
	}
	for _, m := range names {
		n := m[1]
		if !exposed[n] {
			t.Errorf("the tuning order names %s, which neither the learner nor the site stage exposes", n)
		}
	}
}
