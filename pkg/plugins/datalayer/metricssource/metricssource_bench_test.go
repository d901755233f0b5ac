package metricssource

import (
	"encoding/json"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// The source does no per-request work: it only holds settings that the
// scraper reads once. The benchmark measures building it from
// configuration (strict decoding and validation), the only code it runs.
func BenchmarkFactory(b *testing.B) {
	raw := json.RawMessage(`{"scheme": "https", "path": "/metrics", "insecureSkipVerify": false}`)
	h := schedulingtest.NewHandle(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Registration.Factory("src", raw, h); err != nil {
			b.Fatal(err)
		}
	}
}
