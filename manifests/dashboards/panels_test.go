package dashboards

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// rawPanel is what TestPanelConventions reads of a panel's JSON.
type rawPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Options struct {
		GraphMode string `json:"graphMode"`
	} `json:"options"`
	FieldConfig struct {
		Defaults struct {
			Mappings []json.RawMessage `json:"mappings"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Panels []rawPanel `json:"panels"`
}

var (
	increaseRateInterval  = regexp.MustCompile(`increase\([^)]*\$__rate_interval`)
	lastSuccessUnfiltered = regexp.MustCompile(`_last_success_timestamp_seconds(\{[^}]*\})?\)`)
)

// TestPanelConventions checks what the Prometheus parser cannot: a stat
// panel (an instant query) draws no sparkline, a state timeline maps its
// values to named, coloured states, a per-interval panel uses rate (not
// increase over $__rate_interval), queue wait is that of dispatched
// requests, and a last-success timestamp is filtered (> 0) before
// time() - … so that "never" does not read as 56 years.
func TestPanelConventions(t *testing.T) {
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		raw, err := JSON(name)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []rawPanel `json:"panels"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		var all []rawPanel
		for _, p := range d.Panels {
			all = append(all, p)
			all = append(all, p.Panels...)
		}
		for _, p := range all {
			switch p.Type {
			case "stat":
				if p.Options.GraphMode != "none" {
					t.Errorf("%s: %q: stat graphMode %q, want none (instant query)", name, p.Title, p.Options.GraphMode)
				}
			case "state-timeline":
				if len(p.FieldConfig.Defaults.Mappings) == 0 {
					t.Errorf("%s: %q: a state timeline without value mappings", name, p.Title)
				}
			}
		}
	}
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if increaseRateInterval.MatchString(q.Expr) {
			t.Errorf("%s: %q %s: increase over $__rate_interval, use rate: %s", q.Dashboard, q.Panel, q.RefID, q.Expr)
		}
		// Queue wait is the wait of dispatched requests; the other
		// outcomes (rejected at once, evicted at the TTL) would skew it.
		if strings.Contains(q.Expr, "flow_control_request_queue_duration_seconds") && !strings.Contains(q.Expr, `outcome="Dispatched"`) {
			t.Errorf("%s: %q %s: queue wait without outcome=\"Dispatched\": %s", q.Dashboard, q.Panel, q.RefID, q.Expr)
		}
		if strings.Contains(q.Expr, "time() -") && lastSuccessUnfiltered.MatchString(q.Expr) {
			t.Errorf("%s: %q %s: a last-success timestamp without > 0: %s", q.Dashboard, q.Panel, q.RefID, q.Expr)
		}
	}
}
