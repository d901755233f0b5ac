package edf_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/edf"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestFactory(t *testing.T) {
	p, err := edf.Registration.Factory("mine", nil, nil)
	require.NoError(t, err)
	require.Equal(t, scheduling.TypedName{Type: edf.Type, Name: "mine"}, p.TypedName())
	_, err = edf.Registration.Factory("x", []byte(`{"ttl": 1}`), nil)
	require.ErrorContains(t, err, "ttl")
}

func TestOrderByDeadline(t *testing.T) {
	p, _ := edf.New("edf", edf.DefaultParams(), nil)
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		in   []fctest.Arrival
		want []string
	}{
		{"earliest deadline first", []fctest.Arrival{
			{ID: "30s", At: t0, TTL: 30 * time.Second},
			{ID: "10s", At: t0.Add(time.Millisecond), TTL: 10 * time.Second},
			{ID: "20s", At: t0.Add(2 * time.Millisecond), TTL: 20 * time.Second},
		}, []string{"10s", "20s", "30s"}},
		{"no TTL last, in arrival order", []fctest.Arrival{
			{ID: "none1", At: t0}, {ID: "5s", At: t0, TTL: 5 * time.Second}, {ID: "none2", At: t0},
		}, []string{"5s", "none1", "none2"}},
		{"equal deadlines in arrival order", []fctest.Arrival{
			{ID: "a", At: t0, TTL: 2 * time.Second}, {ID: "b", At: t0.Add(time.Second), TTL: time.Second},
		}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { require.Equal(t, tt.want, fctest.Order(t, p, tt.in)) })
	}
}

func TestOrderKeyNoOverflow(t *testing.T) {
	p, _ := edf.New("edf", edf.DefaultParams(), nil)
	require.Equal(t, int64(math.MaxInt64), p.OrderKey(&flowcontrol.Item{}), "no TTL")
}
