package headerbased

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func BenchmarkFilter(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, nil)
			header := fmt.Sprintf("%s,%s,%s", eps[0].Metadata().Address, eps[n/2].HostPort(), eps[n-1].Metadata().Address)
			req := &scheduling.Request{Headers: map[string]string{Header: header}}
			f, err := New(Type, Params{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if len(f.Filter(b.Context(), req, eps)) != 3 {
					b.Fatal("want 3 endpoints")
				}
			}
		})
	}
}
