package scheduling_test

import (
	"context"
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// oneProfileHandler runs a single profile once and makes it primary.
type oneProfileHandler struct{ profile string }

func (oneProfileHandler) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "one-profile-handler", Name: "one-profile-handler"}
}

func (h oneProfileHandler) Pick(_ context.Context, _ *scheduling.Request, profiles map[string]*scheduling.Profile, results map[string]*scheduling.ProfileResult) []*scheduling.Profile {
	if len(results) > 0 {
		return nil // the profile has run: stop
	}
	return []*scheduling.Profile{profiles[h.profile]}
}

func (h oneProfileHandler) ProcessResults(_ context.Context, _ *scheduling.Request, results map[string]*scheduling.ProfileResult) (*scheduling.Result, error) {
	return &scheduling.Result{ProfileResults: results, PrimaryProfile: h.profile}, nil
}

func ExampleScheduler_Process() {
	endpoints := []*scheduling.Endpoint{
		scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "vllm-0", Address: "127.0.0.1", Port: 8000}, scheduling.Metrics{WaitingQueueSize: 7}, nil),
		scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "vllm-1", Address: "127.0.0.2", Port: 8000}, scheduling.Metrics{WaitingQueueSize: 0}, nil),
		scheduling.NewEndpoint(scheduling.EndpointMetadata{Name: "vllm-2", Address: "127.0.0.3", Port: 8000}, scheduling.Metrics{WaitingQueueSize: 3}, nil),
	}

	// A fake scorer with fixed scores stands in for a real one; scores
	// are multiplied by the weight and the picker takes the highest.
	scorer := &schedulingtest.FakeScorer{Name: "queue", Scores: map[string]float64{"vllm-0": 0.1, "vllm-1": 0.9, "vllm-2": 0.6}}
	profile, err := scheduling.NewProfile("default", nil,
		[]scheduling.WeightedScorer{{Scorer: scorer, Weight: 2}},
		&schedulingtest.FakePicker{Name: "max"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	s, err := scheduling.NewScheduler(scheduling.SchedulerConfig{
		ProfileHandler: oneProfileHandler{profile: "default"},
		Profiles:       []*scheduling.Profile{profile},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	res, err := s.Process(context.Background(), &scheduling.Request{ID: "req-1", Model: "llama"}, endpoints)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Targets()[0].Name())
	// Output: vllm-1
}
