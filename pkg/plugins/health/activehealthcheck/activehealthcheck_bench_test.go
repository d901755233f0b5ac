package activehealthcheck

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkSync is the loop's work when the endpoint set changes: nothing
// of it runs on the request path.
func BenchmarkSync(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			c, _ := newChecker(b, "")
			eps := schedulingtest.Endpoints(n, func(_ int, e *schedulingtest.EndpointBuilder) { e.Health(&scheduling.EndpointHealth{}) })
			targets := map[string]*target{}
			b.ReportAllocs()
			for b.Loop() {
				c.sync(targets, eps)
			}
		})
	}
}

// BenchmarkProbe is one probe over loopback HTTP.
func BenchmarkProbe(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	c, _ := newChecker(b, "")
	b.ReportAllocs()
	for b.Loop() {
		if err := c.probe(context.Background(), srv.URL+"/health"); err != nil {
			b.Fatal(err)
		}
	}
}
