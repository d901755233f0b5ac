package sessionaffinity

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// Close drops the session bindings; a closed scorer keeps scoring (every
// endpoint as unbound) and binds nothing more.
func TestCloseDropsBindings(t *testing.T) {
	p, err := Registration.Factory(Type, json.RawMessage(`{"strategy": "session_id"}`), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	s := p.(*Scorer)
	eps := schedulingtest.Endpoints(2, nil)
	ctx := context.Background()
	bind := func() []float64 {
		req := &scheduling.Request{ID: "r", Headers: map[string]string{DefaultSessionIDHeader: "session-1"}}
		scores := make([]float64, len(eps))
		s.Score(ctx, req, eps, scores)
		s.PreRequest(ctx, req, &scheduling.Result{PrimaryProfile: "default", ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: []*scheduling.Endpoint{eps[1]}}}})
		return scores
	}
	bind()
	if got := bind(); got[1] != 1 {
		t.Fatalf("scores of a bound session = %v, want endpoint 1 at 1", got)
	}
	s.Close(scheduling.CloseInfo{})
	if n := s.Sessions(); n != 0 {
		t.Errorf("Sessions after Close = %d, want 0", n)
	}
	if got := bind(); got[0] != 0 || got[1] != 0 {
		t.Errorf("scores after Close = %v, want none", got)
	}
	if n := s.Sessions(); n != 0 {
		t.Errorf("a closed scorer bound %d sessions", n)
	}
	// The header strategy holds nothing.
	hp, err := Registration.Factory(Type, nil, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	hp.(*Scorer).Close(scheduling.CloseInfo{})
}
