package sitestage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// BenchmarkDecide is the whole request step (snapshot load, tiers,
// affinity over a 2 KiB prompt, draw, both counters) at 2, 8 and 64
// sites, a mix of T1 sites with fresh rho and overflow sites.
func BenchmarkDecide(b *testing.B) {
	prompt := []byte(strings.Repeat("a system prompt shared by many requests. ", 50))
	for _, n := range []int{2, 8, 64} {
		for _, aff := range []bool{true, false} {
			b.Run(fmt.Sprintf("sites=%d/affinity=%v", n, aff), func(b *testing.B) {
				sites := make([]sitestate.Site, n)
				for i := range sites {
					name := fmt.Sprintf("site-%02d", i)
					if i%3 == 2 {
						sites[i] = notFull(name, float64(10+i), 1)
					} else {
						sites[i] = room(name, float64(10+i), float64(i%10)/10)
					}
				}
				sites[0].Local, sites[0].Gateway = true, ""
				h := &sitestate.Holder{}
				h.Store(&sitestate.Snapshot{Sites: sites, AnyModel: true})
				s, err := New(Options{Holder: h, LocalSite: "site-00", Seed: 9, Affinity: AffinityOptions{Disabled: !aff},
					Registerer: prometheus.NewRegistry()})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if d := s.Decide("m", prompt); d.Refusal != nil {
							b.Fatal(d.Refusal)
						}
					}
				})
			})
		}
	}
}
