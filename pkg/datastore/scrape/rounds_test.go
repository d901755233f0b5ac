package scrape

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

func TestRoundPhases(t *testing.T) {
	rs := newRounds(context.Background(), &sync.WaitGroup{}, 80*time.Millisecond, 4)
	var got []time.Duration
	for j := range 8 {
		got = append(got, rs.phaseOf(j))
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{0, 40 * ms, 20 * ms, 60 * ms, 10 * ms, 50 * ms, 30 * ms, 70 * ms}, got)
	// Long intervals do not overflow.
	long := newRounds(context.Background(), &sync.WaitGroup{}, time.Hour, 4)
	assert.Equal(t, 30*time.Minute, long.phaseOf(1))
	assert.Equal(t, 7*time.Hour/8, long.phaseOf(7))
}

func TestRoundsNext(t *testing.T) {
	rs := newRounds(context.Background(), &sync.WaitGroup{}, 50*time.Millisecond, 4)
	ms := time.Millisecond
	for _, tt := range []struct {
		phase, at, want time.Duration // at and want count from the epoch
	}{
		{0, 0, 50 * ms},
		{0, 1 * ms, 50 * ms},
		{0, 50 * ms, 100 * ms},
		{25 * ms, 0, 25 * ms},
		{25 * ms, 24 * ms, 25 * ms},
		{25 * ms, 25 * ms, 75 * ms},
		{25 * ms, 26 * ms, 75 * ms},
		{25 * ms, 1000 * ms, 1025 * ms},
	} {
		got := rs.next(tt.phase, rs.epoch.Add(tt.at)).Sub(rs.epoch)
		assert.Equal(t, tt.want, got, "phase %v at %v", tt.phase, tt.at)
	}
}

// checkRounds checks the invariants of rs for the members in ws: every
// member is in exactly one round, no round holds more than size, and there
// are as many rounds as the count needs.
func checkRounds(t *testing.T, rs *rounds, ws []*worker) {
	t.Helper()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	require.Equal(t, len(ws), rs.n)
	running, seen := 0, 0
	for j, r := range rs.slots {
		if r == nil {
			continue
		}
		running++
		assert.NotEmpty(t, r.members, "round %d is running empty", j)
		assert.LessOrEqual(t, len(r.members), rs.size, "round %d", j)
		assert.Equal(t, rs.phaseOf(j), r.phase)
		seen += len(r.members)
	}
	assert.Equal(t, len(ws), seen)
	if len(ws) > 0 {
		assert.Equal(t, rs.want(len(ws)), running, "rounds for %d members", len(ws))
		assert.Less(t, len(rs.slots)-1, rs.want(len(ws)), "no round beyond the count")
	}
	for _, w := range ws {
		r := rs.member[w]
		require.NotNil(t, r)
		_, ok := r.members[w]
		assert.True(t, ok)
	}
}

func TestRoundsJoinLeave(t *testing.T) {
	for _, tt := range []struct {
		name        string
		size, join  int
		leave       []int // indexes of the joined workers, in order
		wantRunning int   // rounds left running
	}{
		{"one round", 16, 10, nil, 1},
		{"exactly full", 4, 8, nil, 2},
		{"one over", 4, 9, nil, 3},
		{"hundred", 16, 100, nil, 7},
		{"size one", 1, 5, []int{1, 3}, 3},
		{"shrink from the front", 4, 12, []int{0, 1, 2, 3, 4, 5}, 2},
		{"shrink from the back", 4, 12, []int{11, 10, 9, 8, 7, 6, 5}, 2},
		{"shrink to one", 16, 100, seq(1, 100), 1},
		{"leave all", 4, 10, seq(0, 10), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			rs := newRounds(ctx, &wg, time.Hour, tt.size)
			var ws []*worker
			for range tt.join {
				w := &worker{tick: make(chan struct{}, 1)}
				rs.join(w)
				rs.join(w) // a second join is a no-op
				ws = append(ws, w)
				checkRounds(t, rs, ws)
			}
			left := map[int]bool{}
			for _, i := range tt.leave {
				rs.leave(ws[i])
				rs.leave(ws[i]) // so is a second leave
				left[i] = true
				var rest []*worker
				for j, w := range ws {
					if !left[j] {
						rest = append(rest, w)
					}
				}
				checkRounds(t, rs, rest)
			}
			running := 0
			for _, r := range rs.slots {
				if r != nil {
					running++
				}
			}
			assert.Equal(t, tt.wantRunning, running)
			if tt.wantRunning == 0 {
				// Emptied rounds stop their goroutines on their own.
				wg.Wait()
			}
		})
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// phaseLog records when each server was scraped.
type phaseLog struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

func (p *phaseLog) server(t *testing.T, name string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.times[name] = append(p.times[name], time.Now())
		p.mu.Unlock()
		_, _ = io.WriteString(w, vllmLoad("1", "1", "0.5"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// phases returns each server's circular mean phase within interval,
// counted from ref, leaving out its first scrapes (at once, not in a
// round).
func (p *phaseLog) phases(ref time.Time, interval time.Duration) map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]float64{}
	for name, ts := range p.times {
		var x, y float64
		for _, at := range ts[min(3, len(ts)):] {
			a := 2 * math.Pi * float64(at.Sub(ref)%interval) / float64(interval)
			x += math.Cos(a)
			y += math.Sin(a)
		}
		out[name] = math.Atan2(y, x) / (2 * math.Pi) * float64(interval)
	}
	return out
}

// circular is the distance between two phases within interval.
func circular(a, b float64, interval time.Duration) time.Duration {
	d := math.Mod(math.Abs(a-b), float64(interval))
	return time.Duration(min(d, float64(interval)-d))
}

// TestScrapesGoInRounds: the scrapes of a round's endpoints come together,
// and the rounds are spread over the interval: 8 endpoints in rounds of 4
// are scraped at two phases half an interval apart.
func TestScrapesGoInRounds(t *testing.T) {
	const interval = 40 * time.Millisecond
	log := &phaseLog{times: map[string][]time.Time{}}
	var specs []datastore.EndpointSpec
	for i := range 8 {
		name := fmt.Sprintf("e%d", i)
		specs = append(specs, specOf(t, log.server(t, name), name))
	}
	ref := time.Now()
	h := start(t, 0, defaultConfig(t), Options{Interval: interval, RoundSize: 4}, specs...)
	time.Sleep(30 * interval)
	h.stop()
	ph := log.phases(ref, interval)
	require.Len(t, ph, 8)
	names := make([]string, 0, len(ph))
	for n := range ph {
		names = append(names, n)
	}
	slices.Sort(names)
	// Group the endpoints whose phases are within 4 ms of e0's.
	var with, without []string
	for _, n := range names {
		d := circular(ph[n], ph["e0"], interval)
		t.Logf("%s: phase %.1f ms, %v from e0's", n, ph[n]/1e6, d)
		if d < 4*time.Millisecond {
			with = append(with, n)
		} else {
			without = append(without, n)
			assert.Greater(t, d, 12*time.Millisecond, "%s: the other round is half an interval away", n)
		}
	}
	assert.Len(t, with, 4, "e0's round")
	require.Len(t, without, 4, "the other round")
	for _, n := range without {
		assert.Less(t, circular(ph[n], ph[without[0]], interval), 4*time.Millisecond, "%s scrapes with %s", n, without[0])
	}
}

// TestSlowScrapeFollowedAtOnce: a scrape that takes longer than the
// interval is followed by the next at once, not at the next round after
// it: the gap between one answer and the next request is about nothing,
// not most of an interval (the median, which load spikes do not move).
func TestSlowScrapeFollowedAtOnce(t *testing.T) {
	const interval, delay = 20 * time.Millisecond, 26 * time.Millisecond
	var mu sync.Mutex
	var answered time.Time
	var gaps []time.Duration
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if !answered.IsZero() {
			gaps = append(gaps, time.Since(answered))
		}
		mu.Unlock()
		time.Sleep(delay)
		_, _ = io.WriteString(w, vllmLoad("1", "1", "0.5"))
		mu.Lock()
		answered = time.Now()
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	h := start(t, 0, defaultConfig(t), Options{Interval: interval}, specOf(t, srv, "slow"))
	time.Sleep(time.Second)
	h.stop()
	mu.Lock()
	defer mu.Unlock()
	require.Greater(t, len(gaps), 10)
	slices.Sort(gaps)
	median := gaps[len(gaps)/2]
	// Back to back: well under a millisecond; waiting for the round: the
	// 14 ms left of the second interval.
	t.Logf("%d scrapes, median gap from an answer to the next request %v", len(gaps)+1, median)
	assert.Less(t, median, interval/4)
}

// TestFirstScrapeNotDoubled: a scrape that does not start on a tick (the
// first one) and takes less than an interval is not followed at once by
// another when its round ticks while it runs; the next comes with the
// round after. Two endpoints in rounds of one (phases 0 and 100 ms of
// 200 ms), first answers 120 ms late: the second endpoint's round ticks
// during its first scrape, yet neither is scraped again before 200 ms.
func TestFirstScrapeNotDoubled(t *testing.T) {
	const interval, delay = 200 * time.Millisecond, 120 * time.Millisecond
	var mu sync.Mutex
	hits := map[string]int{}
	var specs []datastore.EndpointSpec
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name]++
			first := hits[name] == 1
			mu.Unlock()
			if first {
				time.Sleep(delay)
			}
			_, _ = io.WriteString(w, vllmLoad("1", "1", "0.5"))
		}))
		t.Cleanup(srv.Close)
		specs = append(specs, specOf(t, srv, name))
	}
	start(t, 0, defaultConfig(t), Options{Interval: interval, RoundSize: 1}, specs...)
	time.Sleep(170 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, hits, "one scrape each before the rounds come round")
}

// BenchmarkScrapeRounds measures the CPU (user and system, of this process:
// the scraper and the servers it scrapes) per scrape of 10 endpoints at the
// default interval, with a phase per endpoint (round size 1), in rounds of
// the default size, and in one round (16), side by side. Run it with -benchtime 5s or
// more: a scrape is due only every 5 ms.
func BenchmarkScrapeRounds(b *testing.B) {
	for _, size := range []int{1, DefaultRoundSize, 16} {
		b.Run(fmt.Sprintf("round-size-%d", size), func(b *testing.B) {
			var hits, target atomic.Int64
			target.Store(math.MaxInt64)
			done := make(chan struct{})
			var once sync.Once
			var specs []datastore.EndpointSpec
			for i := range 10 {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, vllmLoad("1", "1", "0.5"))
					if hits.Add(1) >= target.Load() {
						once.Do(func() { close(done) })
					}
				}))
				b.Cleanup(srv.Close)
				specs = append(specs, specOf(b, srv, fmt.Sprintf("e%d", i)))
			}
			store := datastore.New(datastore.Options{StalenessThreshold: time.Hour})
			require.NoError(b, store.Replace(specs))
			sc, err := NewScraper(store, defaultConfig(b), Options{RoundSize: size})
			require.NoError(b, err)
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				sc.Run(ctx)
			}()
			defer func() {
				cancel()
				<-stopped
			}()
			time.Sleep(2 * DefaultInterval) // every endpoint in its round
			before := rusage(b)
			target.Store(hits.Load() + int64(b.N))
			b.ResetTimer()
			select {
			case <-done:
			case <-time.After(time.Minute + time.Duration(b.N)*DefaultInterval):
				b.Fatalf("%d of %d scrapes after a minute more than they need", hits.Load()-(target.Load()-int64(b.N)), b.N)
			}
			b.StopTimer()
			b.ReportMetric(float64(rusage(b)-before)/float64(b.N), "cpu-ns/scrape")
		})
	}
}

// rusage is this process's user and system CPU time so far.
func rusage(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
