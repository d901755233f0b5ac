package single

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, schedulingtest.NoParamsCases())
}

func profiles(t testing.TB, names ...string) map[string]*scheduling.Profile {
	t.Helper()
	out := map[string]*scheduling.Profile{}
	for _, n := range names {
		p, err := scheduling.NewProfile(n, nil, nil, &schedulingtest.FakePicker{Name: "picker"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = p
	}
	return out
}

func newHandler(t testing.TB) *Handler {
	t.Helper()
	h, err := New("", Params{}, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestPick(t *testing.T) {
	target := &scheduling.ProfileResult{Targets: schedulingtest.Endpoints(1, nil)}
	tests := []struct {
		name     string
		profiles []string
		results  map[string]*scheduling.ProfileResult
		want     []string
	}{
		{name: "first call runs the profile", profiles: []string{"default"}, want: []string{"default"}},
		{name: "first call runs every profile, by name", profiles: []string{"b", "a", "c"}, want: []string{"a", "b", "c"}},
		{name: "after a result, nothing", profiles: []string{"default"}, results: map[string]*scheduling.ProfileResult{"default": target}},
		{name: "after a failure, nothing", profiles: []string{"default"}, results: map[string]*scheduling.ProfileResult{"default": nil}},
		{name: "no profiles", profiles: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHandler(t)
			got := h.Pick(t.Context(), &scheduling.Request{}, profiles(t, tt.profiles...), tt.results)
			names := []string{}
			for _, p := range got {
				names = append(names, p.Name())
			}
			if !slices.Equal(names, append([]string{}, tt.want...)) {
				t.Errorf("Pick = %v, want %v", names, tt.want)
			}
		})
	}
}

func TestProcessResults(t *testing.T) {
	ok := &scheduling.ProfileResult{Targets: schedulingtest.Endpoints(2, nil)}
	tests := []struct {
		name        string
		results     map[string]*scheduling.ProfileResult
		wantPrimary string
		wantErr     string
		wantNoEps   bool
	}{
		{name: "one result is primary", results: map[string]*scheduling.ProfileResult{"default": ok}, wantPrimary: "default"},
		{
			name: "failed profile", results: map[string]*scheduling.ProfileResult{"default": nil},
			wantErr: `profile "default" failed: no endpoints available`, wantNoEps: true,
		},
		{
			name: "two profiles", results: map[string]*scheduling.ProfileResult{"b": ok, "a": nil},
			wantErr: "expects exactly one scheduling profile, got 2 (a, b)",
		},
		{name: "no results", results: nil, wantErr: "no profile ran", wantNoEps: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := newHandler(t).ProcessResults(t.Context(), &scheduling.Request{}, tt.results)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if got := errors.Is(err, scheduling.ErrNoEndpoints); got != tt.wantNoEps {
					t.Errorf("errors.Is(err, ErrNoEndpoints) = %v, want %v", got, tt.wantNoEps)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if res.PrimaryProfile != tt.wantPrimary {
				t.Errorf("primary = %q, want %q", res.PrimaryProfile, tt.wantPrimary)
			}
			if len(res.ProfileResults) != len(tt.results) {
				t.Errorf("got %d profile results, want %d", len(res.ProfileResults), len(tt.results))
			}
			if got := schedulingtest.Names(res.Targets()); !slices.Equal(got, schedulingtest.Names(ok.Targets)) {
				t.Errorf("targets = %v", got)
			}
		})
	}
}

// TestScheduler runs the handler in the real scheduling loop.
func TestScheduler(t *testing.T) {
	eps := schedulingtest.Endpoints(3, nil)
	scorer := &schedulingtest.FakeScorer{Name: "s", Scores: map[string]float64{"ep-2": 1}}
	dropAll := &schedulingtest.FakeFilter{Name: "none", Keep: func(*scheduling.Endpoint) bool { return false }}
	newProfile := func(name string, filters ...scheduling.Filter) *scheduling.Profile {
		p, err := scheduling.NewProfile(name, filters, []scheduling.WeightedScorer{{Scorer: scorer, Weight: 1}}, &schedulingtest.FakePicker{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name      string
		profiles  []*scheduling.Profile
		want      []string
		wantErr   string
		wantNoEps bool
	}{
		{name: "one profile", profiles: []*scheduling.Profile{newProfile("default")}, want: []string{"ep-2"}},
		{name: "profile fails", profiles: []*scheduling.Profile{newProfile("default", dropAll)}, wantErr: "failed", wantNoEps: true},
		{name: "two profiles", profiles: []*scheduling.Profile{newProfile("a"), newProfile("b")}, wantErr: "exactly one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := scheduling.NewScheduler(scheduling.SchedulerConfig{ProfileHandler: newHandler(t), Profiles: tt.profiles})
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Schedule(t.Context(), &scheduling.Request{}, eps)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if got := errors.Is(err, scheduling.ErrNoEndpoints); got != tt.wantNoEps {
					t.Errorf("errors.Is(err, ErrNoEndpoints) = %v, want %v", got, tt.wantNoEps)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := schedulingtest.Names(res.Targets()); !slices.Equal(got, tt.want) {
				t.Errorf("targets = %v, want %v", got, tt.want)
			}
		})
	}
}
