package healthparam

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		decode  string // decode error
		checkEr string // Check error
	}{
		{in: `"30s"`, want: 30 * time.Second},
		{in: `"250ms"`, want: 250 * time.Millisecond},
		{in: `null`, want: time.Second},
		{in: `"soon"`, checkEr: `f: invalid duration "soon"`},
		{in: `30`, decode: "cannot unmarshal number"},
		{in: `"2h"`, want: 2 * time.Hour, checkEr: "f: must be between 1ms and 1h0m0s, got 2h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d := D(time.Second)
			err := json.Unmarshal([]byte(tt.in), &d)
			if tt.decode != "" {
				if err == nil || !strings.Contains(err.Error(), tt.decode) {
					t.Fatalf("Unmarshal(%s) = %v, want an error containing %q", tt.in, err, tt.decode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			err = d.Check("f", time.Millisecond, time.Hour)
			if tt.checkEr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.checkEr) {
					t.Fatalf("Check = %v, want %q", err, tt.checkEr)
				}
				return
			}
			if err != nil || d.Duration != tt.want {
				t.Fatalf("got %v, %v; want %v", d.Duration, err, tt.want)
			}
			out, _ := json.Marshal(d)
			if string(out) != `"`+tt.want.String()+`"` {
				t.Errorf("Marshal = %s", out)
			}
		})
	}
}

func TestRegisterOrReuse(t *testing.T) {
	reg := prometheus.NewRegistry()
	mk := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"to"})
	}
	a, err := RegisterOrReuse(reg, mk())
	if err != nil {
		t.Fatal(err)
	}
	b, err := RegisterOrReuse(reg, mk())
	if err != nil || a != b {
		t.Fatalf("second registration: %v, same=%v", err, a == b)
	}
	if _, err := RegisterOrReuse(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "other"})); err == nil {
		t.Fatal("a different collector under the same name must fail")
	}
}
