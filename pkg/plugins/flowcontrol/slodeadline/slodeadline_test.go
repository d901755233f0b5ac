package slodeadline_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/internal/fctest"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/slodeadline"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestParams(t *testing.T) {
	tests := []struct {
		raw, err string
	}{
		{raw: ``},
		{raw: `{"headers": ["x-my-slo"]}`},
		{raw: `{"headers": []}`, err: "headers: must name at least one header"},
		{raw: `{"headers": ["X-Up"]}`, err: `headers[0]: "X-Up" is not a lower-case header name`},
		{raw: `{"headers": ["a","b","c","d","e","f","g","h","i"]}`, err: "headers: at most 8 headers, got 9"},
		{raw: `{"header": "x"}`, err: `unknown field "header"`},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			p, err := slodeadline.Registration.Factory("s", []byte(tt.raw), nil)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, scheduling.TypedName{Type: slodeadline.Type, Name: "s"}, p.TypedName())
		})
	}
}

func TestOrderKey(t *testing.T) {
	p, _ := slodeadline.New("s", slodeadline.DefaultParams(), nil)
	rcv := time.Unix(1000, 0)
	tests := []struct {
		name    string
		headers map[string]string
		want    int64
	}{
		{"llm-d header", map[string]string{slodeadline.HeaderLLMD: "250"}, rcv.Add(250 * time.Millisecond).UnixNano()},
		{"GIE header", map[string]string{slodeadline.HeaderGIE: "100"}, rcv.Add(100 * time.Millisecond).UnixNano()},
		{"llm-d wins", map[string]string{slodeadline.HeaderLLMD: "7", slodeadline.HeaderGIE: "1"}, rcv.Add(7 * time.Millisecond).UnixNano()},
		{"spaces", map[string]string{slodeadline.HeaderLLMD: " 5 "}, rcv.Add(5 * time.Millisecond).UnixNano()},
		{"none", nil, math.MaxInt64},
		{"negative", map[string]string{slodeadline.HeaderLLMD: "-5"}, math.MaxInt64},
		{"not a number", map[string]string{slodeadline.HeaderLLMD: "5ms"}, math.MaxInt64},
		{"huge is capped", map[string]string{slodeadline.HeaderLLMD: "9223372036854775807"}, rcv.Add(100 * 365 * 24 * time.Hour).UnixNano()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, p.OrderKey(&flowcontrol.Item{Received: rcv, Headers: tt.headers}))
		})
	}
}

func TestOrder(t *testing.T) {
	p, _ := slodeadline.New("s", slodeadline.DefaultParams(), nil)
	t0 := time.Unix(1000, 0)
	in := []fctest.Arrival{
		{ID: "none", At: t0},
		{ID: "slow", At: t0, Received: t0, Headers: map[string]string{slodeadline.HeaderLLMD: "2000"}},
		{ID: "fast", At: t0.Add(time.Millisecond), Received: t0, Headers: map[string]string{slodeadline.HeaderLLMD: "100"}},
		{ID: "early", At: t0.Add(2 * time.Millisecond), Received: t0.Add(-time.Second), Headers: map[string]string{slodeadline.HeaderLLMD: "1000"}}, // waited upstream
	}
	require.Equal(t, []string{"early", "fast", "slow", "none"}, fctest.Order(t, p, in))
}

// FuzzOrderKey: any header value gives a key, never a panic, and a value
// that is not a non-negative integer gives no deadline.
func FuzzOrderKey(f *testing.F) {
	for _, s := range []string{"0", "100", " 42 ", "-1", "1e3", "9223372036854775807", "", "abc"} {
		f.Add(s)
	}
	p, _ := slodeadline.New("s", slodeadline.DefaultParams(), nil)
	rcv := time.Unix(1000, 0)
	f.Fuzz(func(t *testing.T, v string) {
		k := p.OrderKey(&flowcontrol.Item{Received: rcv, Headers: map[string]string{slodeadline.HeaderLLMD: v}})
		if k != math.MaxInt64 && k < rcv.UnixNano() {
			t.Fatalf("deadline %d before the request arrived (%q)", k, v)
		}
	})
}
