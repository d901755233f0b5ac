package metrics

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// TestLimiterDecisionIsFixed: a value's label is decided once: however
// first sightings race for the last slot of a cap, every later call for
// the value returns what the first call returned, so a +1 and its -1 land
// on the same series (never +1 on "other" and -1 on the value).
func TestLimiterDecisionIsFixed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound func() func(v string) string
	}{
		{"limiter", func() func(string) string { l := newLimiter(2); return l.bound }},
		{"pair limiter", func() func(string) string {
			l := &pairLimiter{max: 2}
			return func(v string) string { return l.bound(v, "0") }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			workers := max(4, runtime.GOMAXPROCS(0)*2)
			for round := range 500 {
				bound := tc.bound()
				var wg sync.WaitGroup
				start := make(chan struct{})
				errs := make(chan string, workers)
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						v := fmt.Sprint("v", w%3)
						<-start
						first := bound(v)
						runtime.Gosched()
						if again := bound(v); again != first {
							errs <- fmt.Sprintf("round %d: %s first bound to %q, then to %q", round, v, first, again)
						}
					}()
				}
				close(start)
				wg.Wait()
				close(errs)
				for e := range errs {
					t.Fatal(e)
				}
			}
		})
	}
}

// TestLimiterDecisionIsFixedInterleaved is the interleaving the hammer
// above makes likely, made certain: between a first sighting's miss and
// its look at the cap, another call admits the same value and spends the
// cap. The first call must still return the value, as every later one does.
func TestLimiterDecisionIsFixedInterleaved(t *testing.T) {
	l := newLimiter(1)
	p := &pairLimiter{max: 1}
	for _, tc := range []struct {
		name  string
		hook  *func()
		bound func(string) string
	}{
		{"limiter", &l.afterMiss, l.bound},
		{"pair limiter", &p.afterMiss, func(v string) string { return p.bound(v, "0") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			*tc.hook = func() {
				*tc.hook = nil
				if got := tc.bound("a"); got != "a" {
					t.Errorf("the racing call got %q", got)
				}
			}
			first := tc.bound("a")
			again := tc.bound("a")
			if first != again || first != "a" {
				t.Fatalf("a bound first to %q, then to %q", first, again)
			}
			if got := tc.bound("b"); got != OverflowLabelValue {
				t.Fatalf("past the cap b bound to %q", got)
			}
		})
	}
}
