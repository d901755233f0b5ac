package globalstrict_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/edf"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/globalstrict"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestFactory(t *testing.T) {
	p, err := globalstrict.Registration.Factory("mine", nil, nil)
	require.NoError(t, err)
	require.Equal(t, scheduling.TypedName{Type: globalstrict.Type, Name: "mine"}, p.TypedName())
	_, err = globalstrict.Registration.Factory("x", []byte(`{"a": 1}`), nil)
	require.Error(t, err)
}

func TestPick(t *testing.T) {
	gs, _ := globalstrict.New("gs", globalstrict.DefaultParams(), nil)
	ed, _ := edf.New("edf", edf.DefaultParams(), nil)
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name     string
		ordering flowcontrol.OrderingPolicy
		in       []fctest.Arrival
		want     []string
	}{
		{"fcfs: oldest across flows", flowcontrol.FCFS{}, []fctest.Arrival{
			{ID: "a1", Flow: "a", At: t0}, {ID: "a2", Flow: "a", At: t0.Add(1)}, {ID: "b1", Flow: "b", At: t0.Add(2)}, {ID: "a3", Flow: "a", At: t0.Add(3)},
		}, []string{"a1", "a2", "b1", "a3"}},
		{"edf: earliest deadline across flows", ed, []fctest.Arrival{
			{ID: "a30", Flow: "a", At: t0, TTL: 30 * time.Second}, {ID: "b10", Flow: "b", At: t0, TTL: 10 * time.Second}, {ID: "c20", Flow: "c", At: t0, TTL: 20 * time.Second},
		}, []string{"b10", "c20", "a30"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { require.Equal(t, tt.want, fctest.Order(t, tt.ordering, tt.in, gs)) })
	}
}
