package roundrobin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/roundrobin"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestFactory(t *testing.T) {
	p, err := roundrobin.Registration.Factory("mine", nil, nil)
	require.NoError(t, err)
	require.Equal(t, scheduling.TypedName{Type: roundrobin.Type, Name: "mine"}, p.TypedName())
	_, err = roundrobin.Registration.Factory("x", []byte(`{"a": 1}`), nil)
	require.Error(t, err)
}

func TestTurns(t *testing.T) {
	rr, _ := roundrobin.New("rr", roundrobin.DefaultParams(), nil)
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		in   []fctest.Arrival
		want []string
	}{
		{"flows in turn, in the order they became active", []fctest.Arrival{
			{ID: "a1", Flow: "a", At: t0}, {ID: "a2", Flow: "a", At: t0}, {ID: "a3", Flow: "a", At: t0},
			{ID: "b1", Flow: "b", At: t0}, {ID: "c1", Flow: "c", At: t0}, {ID: "c2", Flow: "c", At: t0},
		}, []string{"a1", "b1", "c1", "a2", "c2", "a3"}},
		{"one flow", []fctest.Arrival{{ID: "x", Flow: "a", At: t0}, {ID: "y", Flow: "a", At: t0}}, []string{"x", "y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { require.Equal(t, tt.want, fctest.Order(t, flowcontrol.FCFS{}, tt.in, rr)) })
	}
}
