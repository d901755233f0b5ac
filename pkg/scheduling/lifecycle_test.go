package scheduling_test

import (
	"context"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestPreRequestAndCompleteOrdering: PreRequest hooks run once per
// request and never after ResponseComplete, so a hook that counts in
// PreRequest and releases in ResponseComplete cannot leak.
func TestPreRequestAndCompleteOrdering(t *testing.T) {
	eps := schedulingtest.Endpoints(2, nil)
	newScheduler := func(hooks *fakeHooks) *scheduling.Scheduler {
		return mustScheduler(t, scheduling.SchedulerConfig{
			ProfileHandler:   singleProfileHandler("p", nil),
			Profiles:         []*scheduling.Profile{scoredProfile(t, "p", map[string]float64{"ep-1": 1})},
			PreRequest:       []scheduling.PreRequest{hooks},
			ResponseComplete: []scheduling.ResponseComplete{hooks},
		})
	}
	ctx := context.Background()

	t.Run("complete first: PreRequest does not run", func(t *testing.T) {
		hooks := &fakeHooks{name: "h"}
		s := newScheduler(hooks)
		req := &scheduling.Request{ID: "r"}
		res, err := s.Schedule(ctx, req, eps)
		if err != nil {
			t.Fatal(err)
		}
		if !s.ResponseComplete(ctx, req, &scheduling.Response{Disconnected: true}, nil) {
			t.Fatal("first ResponseComplete did not run")
		}
		s.PreRequest(ctx, req, res)
		if n := len(hooks.preReq); n != 0 {
			t.Errorf("PreRequest hooks ran %d times after ResponseComplete, want 0", n)
		}
		if s.ResponseComplete(ctx, req, &scheduling.Response{}, nil) {
			t.Error("second ResponseComplete ran")
		}
	})

	t.Run("a retry runs PreRequest again, so hooks can move what they counted", func(t *testing.T) {
		hooks := &fakeHooks{name: "h"}
		s := newScheduler(hooks)
		req := &scheduling.Request{ID: "r"}
		res, err := s.Process(ctx, req, eps)
		if err != nil {
			t.Fatal(err)
		}
		s.PreRequest(ctx, req, res)
		if n := len(hooks.preReq); n != 2 {
			t.Errorf("PreRequest hooks ran %d times, want 2", n)
		}
		s.ResponseComplete(ctx, req, &scheduling.Response{}, nil)
		s.PreRequest(ctx, req, res)
		if n := len(hooks.preReq); n != 2 {
			t.Errorf("PreRequest hooks ran %d times after completion, want still 2", n)
		}
	})

	t.Run("a PreRequest hook that completes the request does not deadlock", func(t *testing.T) {
		var s *scheduling.Scheduler
		var completes int
		quitter := &hookFuncs{
			pre: func(ctx context.Context, req *scheduling.Request) {
				if !s.ResponseComplete(ctx, req, &scheduling.Response{Disconnected: true}, nil) {
					t.Error("ResponseComplete from a PreRequest hook was not taken")
				}
				if completes != 0 {
					t.Error("completion hooks ran while PreRequest hooks were running")
				}
			},
			complete: func(ctx context.Context, req *scheduling.Request) {
				completes++
				// A completion hook that completes again is a no-op, not a deadlock.
				if s.ResponseComplete(ctx, req, &scheduling.Response{}, nil) {
					t.Error("nested ResponseComplete ran")
				}
			},
		}
		s = mustScheduler(t, scheduling.SchedulerConfig{
			ProfileHandler:   singleProfileHandler("p", nil),
			Profiles:         []*scheduling.Profile{scoredProfile(t, "p", map[string]float64{"ep-1": 1})},
			PreRequest:       []scheduling.PreRequest{quitter},
			ResponseComplete: []scheduling.ResponseComplete{quitter},
		})
		if _, err := s.Process(ctx, &scheduling.Request{ID: "r"}, eps); err != nil {
			t.Fatal(err)
		}
		if completes != 1 {
			t.Errorf("completion hooks ran %d times, want 1 (after the PreRequest hooks)", completes)
		}
	})

	t.Run("racing: every PreRequest that ran is followed by one completion", func(t *testing.T) {
		for range 200 {
			hooks := &fakeHooks{name: "h"}
			s := newScheduler(hooks)
			req := &scheduling.Request{ID: "r"}
			res, err := s.Schedule(ctx, req, eps)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); s.PreRequest(ctx, req, res) }()
			go func() { defer wg.Done(); s.ResponseComplete(ctx, req, &scheduling.Response{Disconnected: true}, nil) }()
			wg.Wait()
			hooks.mu.Lock()
			pre := len(hooks.preReq)
			hooks.mu.Unlock()
			if pre > 1 || hooks.completes.Load() != 1 {
				t.Fatalf("pre-request %d, completes %d; want at most 1 and exactly 1", pre, hooks.completes.Load())
			}
		}
	})
}

// repeatHandler asks for every profile on every call, forever.
type repeatHandler struct{ picks int }

func (h *repeatHandler) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "repeat-handler", Name: "repeat"}
}

func (h *repeatHandler) Pick(_ context.Context, _ *scheduling.Request, profiles map[string]*scheduling.Profile, _ map[string]*scheduling.ProfileResult) []*scheduling.Profile {
	h.picks++
	var out []*scheduling.Profile
	for _, p := range profiles {
		out = append(out, p, p) // twice in one round, too
	}
	return out
}

func (h *repeatHandler) ProcessResults(_ context.Context, _ *scheduling.Request, results map[string]*scheduling.ProfileResult) (*scheduling.Result, error) {
	return &scheduling.Result{ProfileResults: results, PrimaryProfile: "a"}, nil
}

// TestScheduleRunsEachProfileOnce: a handler that keeps returning the same
// profiles cannot loop forever, and a profile runs at most once.
func TestScheduleRunsEachProfileOnce(t *testing.T) {
	picker := &countingPicker{}
	a := mustProfile(t, "a", nil, nil, picker)
	h := &repeatHandler{}
	s := mustScheduler(t, scheduling.SchedulerConfig{ProfileHandler: h, Profiles: []*scheduling.Profile{a}})
	res, err := s.Schedule(context.Background(), &scheduling.Request{ID: "r"}, schedulingtest.Endpoints(3, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Targets()) != 1 {
		t.Fatalf("targets = %v", res.Targets())
	}
	if picker.calls != 1 {
		t.Errorf("profile ran %d times, want 1", picker.calls)
	}
	if h.picks != 2 {
		t.Errorf("handler asked %d times, want 2 (the second round ran nothing new)", h.picks)
	}
}

type countingPicker struct{ calls int }

func (p *countingPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "counting-picker", Name: "counting"}
}

func (p *countingPicker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	p.calls++
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[0].Endpoint}}
}

// hookFuncs is a PreRequest and ResponseComplete plugin made of functions.
type hookFuncs struct {
	pre      func(context.Context, *scheduling.Request)
	complete func(context.Context, *scheduling.Request)
}

func (h *hookFuncs) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "hook-funcs", Name: "hooks"}
}

func (h *hookFuncs) PreRequest(ctx context.Context, req *scheduling.Request, _ *scheduling.Result) {
	h.pre(ctx, req)
}

func (h *hookFuncs) ResponseComplete(ctx context.Context, req *scheduling.Request, _ *scheduling.Response, _ *scheduling.Endpoint) {
	h.complete(ctx, req)
}
