package fcfs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/fcfs"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestFactory(t *testing.T) {
	p, err := fcfs.Registration.Factory("mine", nil, nil)
	require.NoError(t, err)
	require.Equal(t, scheduling.TypedName{Type: fcfs.Type, Name: "mine"}, p.TypedName())
	_, err = fcfs.Registration.Factory("x", []byte(`{"any": 1}`), nil)
	require.ErrorContains(t, err, "any")
}

func TestOrder(t *testing.T) {
	p, _ := fcfs.New("fcfs", fcfs.DefaultParams(), nil)
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		in   []fctest.Arrival
		want []string
	}{
		{"by enqueue time", []fctest.Arrival{{ID: "b", At: t0.Add(2)}, {ID: "a", At: t0.Add(1)}, {ID: "c", At: t0.Add(3)}}, []string{"a", "b", "c"}},
		{"ties in arrival order", []fctest.Arrival{{ID: "x", At: t0}, {ID: "y", At: t0}, {ID: "z", At: t0}}, []string{"x", "y", "z"}},
		{"TTL is ignored", []fctest.Arrival{{ID: "long", At: t0, TTL: time.Hour}, {ID: "short", At: t0.Add(1), TTL: time.Second}}, []string{"long", "short"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, fctest.Order(t, p, tt.in))
		})
	}
}
