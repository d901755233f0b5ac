package sessionaffinity

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func benchEndpoints(n int) []*scheduling.Endpoint {
	return schedulingtest.Endpoints(n, func(_ int, b *schedulingtest.EndpointBuilder) { b.Namespace("inference") })
}

// BenchmarkScoreEncoded scores a request carrying a session token.
func BenchmarkScoreEncoded(b *testing.B) {
	s := newScorer(b, "")
	for _, n := range []int{10, 100, 1000} {
		eps := benchEndpoints(n)
		req := &scheduling.Request{Headers: map[string]string{"x-session-token": EncodeEndpoint(eps[n/2])}}
		scores := make([]float64, n)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Score(b.Context(), req, eps, scores)
			}
		})
	}
}

// BenchmarkScoreSessionID scores a request of a known session.
func BenchmarkScoreSessionID(b *testing.B) {
	s := newScorer(b, `{"strategy": "session_id"}`)
	for _, n := range []int{10, 100, 1000} {
		eps := benchEndpoints(n)
		req := &scheduling.Request{Headers: map[string]string{"x-session-id": "0f9c2a6e-session"}}
		s.PreRequest(b.Context(), req, &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{
			"p": {Targets: []*scheduling.Endpoint{eps[n/2]}},
		}})
		scores := make([]float64, n)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Score(b.Context(), req, eps, scores)
			}
		})
	}
}

// BenchmarkBindParallel binds sessions from parallel goroutines.
func BenchmarkBindParallel(b *testing.B) {
	s := newScorer(b, `{"strategy": "session_id"}`)
	for _, n := range []int{10, 100, 1000} {
		eps := benchEndpoints(n)
		results := make([]*scheduling.Result, n)
		reqs := make([]*scheduling.Request, 4096)
		for i := range results {
			results[i] = &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{
				"p": {Targets: []*scheduling.Endpoint{eps[i]}},
			}}
		}
		for i := range reqs {
			reqs[i] = &scheduling.Request{Headers: map[string]string{"x-session-id": fmt.Sprintf("session-%d", i)}}
		}
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					s.PreRequest(b.Context(), reqs[i%len(reqs)], results[i%n])
					i++
				}
			})
		})
	}
}
