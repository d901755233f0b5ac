package config_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	st "github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// prompt returns n bytes of text made of 64-byte blocks (one prefix block at
// the default 16 tokens × 4 characters) that differ per seed.
func prompt(seed string, n int) []byte {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(seed)
		b.WriteString(strings.Repeat("-", 63-len(seed)))
		b.WriteByte('\n')
	}
	return []byte(b.String()[:n])
}

func profileScores(t *testing.T, s *scheduling.Scheduler, req *scheduling.Request, eps []*scheduling.Endpoint) map[string]float64 {
	t.Helper()
	ctx := context.Background()
	s.Prepare(ctx, req, eps)
	profiles := s.Profiles()
	require.Len(t, profiles, 1)
	scored, err := profiles[0].Scores(ctx, req, eps)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, se := range scored {
		out[se.Endpoint.Name()] = se.Score
	}
	return out
}

// TestDefaultProfileParity checks that the default profile ranks endpoints
// with GIE v1.5's formulas: queue-scorer (max-q)/(max-min), all-equal = 1;
// kv-cache-utilization-scorer 1 - usage; prefix-cache-scorer matched/total
// blocks; weights 2, 2, 3, not normalised.
func TestDefaultProfileParity(t *testing.T) {
	type ep struct {
		name  string
		queue int
		kv    float64
	}
	tests := []struct {
		name      string
		endpoints []ep
		// warm sends a request with this prompt to the named endpoint first,
		// so the prefix index learns it.
		warm     string
		warmText []byte
		text     []byte
		want     map[string]float64
		wantPick string
	}{
		{
			name:      "queue min-max and free KV",
			endpoints: []ep{{"a", 0, 0.2}, {"b", 5, 0.1}, {"c", 10, 0.9}},
			text:      prompt("cold", 256),
			// a: 2×1 + 2×0.8; b: 2×0.5 + 2×0.9; c: 2×0 + 2×0.1
			want:     map[string]float64{"a": 3.6, "b": 2.8, "c": 0.2},
			wantPick: "a",
		},
		{
			name:      "equal queues score 1 for all",
			endpoints: []ep{{"a", 3, 0.5}, {"b", 3, 0.25}, {"c", 3, 0}},
			text:      prompt("cold", 256),
			want:      map[string]float64{"a": 3, "b": 3.5, "c": 4},
			wantPick:  "c",
		},
		{
			name:      "a full prefix hit outweighs load",
			endpoints: []ep{{"a", 0, 0.2}, {"b", 5, 0.1}, {"c", 6, 0.5}},
			warm:      "c", warmText: prompt("shared", 256),
			text: prompt("shared", 256),
			// c: 2×0 + 2×0.5 + 3×1 (4 of 4 blocks); a: 2 + 1.6; b: 2×(1/6) + 1.8
			want:     map[string]float64{"a": 3.6, "b": 2.0/6.0 + 1.8, "c": 4.0},
			wantPick: "c",
		},
		{
			name:      "a half prefix hit",
			endpoints: []ep{{"a", 0, 0.2}, {"b", 5, 0.1}, {"c", 10, 0.5}},
			warm:      "c", warmText: append(prompt("shared", 128), prompt("first", 128)...),
			text: append(prompt("shared", 128), prompt("other", 128)...),
			// c: 0 + 1 + 3×(2/4)
			want:     map[string]float64{"a": 3.6, "b": 2.8, "c": 2.5},
			wantPick: "a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loaded, err := load(t, string(configfiles.Default))
			require.NoError(t, err)
			var eps []*scheduling.Endpoint
			byName := map[string]*scheduling.Endpoint{}
			for i, e := range tt.endpoints {
				built := st.Endpoint(e.name).Address("127.10.0." + string(rune('1'+i))).Queue(e.queue).KVCache(e.kv).Build()
				eps = append(eps, built)
				byName[e.name] = built
			}
			ctx := context.Background()
			if tt.warm != "" {
				req := &scheduling.Request{ID: "warm", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: tt.warmText}}
				res, err := loaded.Scheduler.Process(ctx, req, []*scheduling.Endpoint{byName[tt.warm]})
				require.NoError(t, err)
				require.Equal(t, tt.warm, res.Targets()[0].Name())
			}
			req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: tt.text}}
			got := profileScores(t, loaded.Scheduler, req, eps)
			require.Len(t, got, len(tt.want))
			for name, want := range tt.want {
				require.InDelta(t, want, got[name], 1e-9, "score of %s (all: %v)", name, got)
			}
			res, err := loaded.Scheduler.Process(ctx, &scheduling.Request{ID: "r2", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: tt.text}}, eps)
			require.NoError(t, err)
			require.Equal(t, tt.wantPick, res.Targets()[0].Name())
		})
	}
}

// TestLoRAParity checks lora-affinity-scorer's tiers as GIE v1.5 scores
// them: adapter active 1.0, free slot 0.8, adapter waiting 0.6, else 0.
func TestLoRAParity(t *testing.T) {
	loaded, err := load(t, header+"plugins:\n- type: lora-affinity-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: lora-affinity-scorer\n")
	require.NoError(t, err)
	eps := []*scheduling.Endpoint{
		st.Endpoint("active").Address("127.10.0.1").ActiveModels("sql-lora").MaxModels(2).Build(),
		st.Endpoint("free-slot").Address("127.10.0.2").ActiveModels("other").MaxModels(2).Build(),
		st.Endpoint("waiting").Address("127.10.0.3").ActiveModels("x", "y").WaitingModels("sql-lora").MaxModels(2).Build(),
		st.Endpoint("full").Address("127.10.0.4").ActiveModels("x", "y").MaxModels(2).Build(),
	}
	req := &scheduling.Request{ID: "r", Model: "sql-lora", TargetModel: "sql-lora"}
	got := profileScores(t, loaded.Scheduler, req, eps)
	want := map[string]float64{"active": 1, "free-slot": 0.8, "waiting": 0.6, "full": 0}
	for name, w := range want {
		require.InDelta(t, w, got[name], 1e-9, "score of %s", name)
	}
}
