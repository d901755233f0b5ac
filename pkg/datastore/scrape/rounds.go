package scrape

import (
	"context"
	"math/bits"
	"sync"
	"time"
)

// DefaultRoundSize is how many endpoints one scrape round wakes at once
// (see rounds).
const DefaultRoundSize = 4

// rounds groups the workers into scrape rounds: each round has a phase
// within the interval and one timer, and at every tick it wakes all its
// members together. A scrape is a few microseconds of work but each
// wake-up of a goroutine, of the thread that runs it and of the model
// server costs more than that (futex, epoll and sysmon calls, and a
// cross-CPU wake-up of the server for the one write): a random phase per
// endpoint pays them once per scrape, a round pays them once for all its
// members, whose requests go out back to back and whose answers come back
// while the scraper is still awake.
//
// A round holds at most size members, and there are ceil(n/size) rounds
// for n workers, so a round's burst is bounded. The default size is a
// trade between the wake-ups saved and the burst that requests arriving
// during a round wait behind. Measured on a 2-core VM (the EPP, its model
// servers and the load generator on the same cores, 50 ms interval; idle:
// ten modelsim processes; under load: bench/matrix, GIE's default
// profile, 1 KB prompts):
//
//	round size                      1      4      8      16
//	idle, 10 endpoints (CPU ms/s)   100    68     -      36
//	100 endpoints, 300 req/s: p99   4.7    3.3    6.7    13.7 ms
//	  CPU per request               1.41   1.26   1.19   1.14 ms
//
// Rounds of 8 or more make the tail worse than a phase per endpoint; 4
// makes it better and still saves a third of the idle CPU.
// BenchmarkScrapeRounds measures the saving per scrape side by side.
// Round j's phase is interval × the j-th term of the base-2 van der Corput
// sequence (0, 1/2, 1/4, 3/4, 1/8, …), counted from the time the scraper
// started: the first rounds are spread evenly over the interval, and a
// round added later does not move the others. Every EPP replica starts at
// its own time, so replicas do not scrape in step either. A member that
// a leave moves to another round changes phase once: the gap between two of
// its scrapes is then up to two intervals.
//
// rounds is used by the Run goroutine only (join, leave); each round's
// timer goroutine reads its members under mu. The round goroutines are
// owned by Run: they stop when its context ends, or when their round
// empties.
type rounds struct {
	interval time.Duration
	size     int
	epoch    time.Time
	ctx      context.Context
	wg       *sync.WaitGroup

	mu     sync.Mutex
	slots  []*round // slots[j] has phase j; nil when not running
	member map[*worker]*round
	n      int // workers that are members
}

// round is one phase's members and the goroutine that ticks them.
type round struct {
	phase   time.Duration
	members map[*worker]struct{} // guarded by rounds.mu
	stop    context.CancelFunc
}

// newRounds returns rounds of at most size members (at least 1) whose
// goroutines run in wg until ctx ends.
func newRounds(ctx context.Context, wg *sync.WaitGroup, interval time.Duration, size int) *rounds {
	return &rounds{
		interval: interval,
		size:     max(size, 1),
		epoch:    time.Now(),
		ctx:      ctx,
		wg:       wg,
		member:   map[*worker]*round{},
	}
}

// vanDerCorput returns the j-th term of the base-2 van der Corput sequence
// as a fraction of 1<<32: j's bits mirrored behind the binary point.
func vanDerCorput(j int) uint64 {
	return uint64(bits.Reverse32(uint32(j)))
}

// phaseOf is slot j's phase within the interval.
func (rs *rounds) phaseOf(j int) time.Duration {
	hi, lo := bits.Mul64(uint64(rs.interval), vanDerCorput(j)) // no overflow at any interval
	return time.Duration(hi<<32 | lo>>32)
}

// want is the number of rounds for n members.
func (rs *rounds) want(n int) int {
	return max((n+rs.size-1)/rs.size, 1)
}

// join makes w a member of the least filled of the rounds its count
// allows, starting that round's goroutine if it is not running.
func (rs *rounds) join(w *worker) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.member[w] != nil {
		return
	}
	rs.n++
	rs.add(w, rs.leastFilled(rs.want(rs.n)))
}

// leave removes w from its round, stopping the round when it empties, and
// moves the members of rounds beyond the count that n members need into
// the others, so that a shrinking pool keeps few, full rounds.
func (rs *rounds) leave(w *worker) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.member[w]
	if r == nil {
		return
	}
	rs.n--
	rs.remove(w, r)
	keep := rs.want(rs.n)
	for j := keep; j < len(rs.slots); j++ {
		if rs.slots[j] == nil {
			continue
		}
		for m := range rs.slots[j].members {
			rs.remove(m, rs.slots[j])
			rs.add(m, rs.leastFilled(keep))
			if rs.slots[j] == nil {
				break
			}
		}
	}
	for len(rs.slots) > 0 && rs.slots[len(rs.slots)-1] == nil {
		rs.slots = rs.slots[:len(rs.slots)-1]
	}
}

// leastFilled returns the index of the emptiest of the first k slots (an
// absent one counts as empty; the lowest index wins a tie).
func (rs *rounds) leastFilled(k int) int {
	best, bestN := 0, -1
	for j := range k {
		n := 0
		if j < len(rs.slots) && rs.slots[j] != nil {
			n = len(rs.slots[j].members)
		}
		if bestN < 0 || n < bestN {
			best, bestN = j, n
		}
	}
	return best
}

// add puts w into slot j, starting the round there if needed; rs.mu held.
func (rs *rounds) add(w *worker, j int) {
	for len(rs.slots) <= j {
		rs.slots = append(rs.slots, nil)
	}
	r := rs.slots[j]
	if r == nil {
		ctx, cancel := context.WithCancel(rs.ctx)
		r = &round{phase: rs.phaseOf(j), members: map[*worker]struct{}{}, stop: cancel}
		rs.slots[j] = r
		rs.wg.Go(func() { rs.tick(ctx, r) })
	}
	r.members[w] = struct{}{}
	rs.member[w] = r
}

// remove takes w out of r, stopping r when it empties; rs.mu held.
func (rs *rounds) remove(w *worker, r *round) {
	delete(r.members, w)
	delete(rs.member, w)
	if len(r.members) > 0 {
		return
	}
	r.stop()
	for j, s := range rs.slots {
		if s == r {
			rs.slots[j] = nil
		}
	}
}

// next is the first instant after now at phase within an interval,
// counted from the epoch.
func (rs *rounds) next(phase time.Duration, now time.Time) time.Time {
	since := now.Sub(rs.epoch) - phase
	k := since / rs.interval
	if since >= 0 {
		k++
	}
	return rs.epoch.Add(phase + k*rs.interval)
}

// tick wakes r's members at every instant of its phase until ctx ends.
// A member still scraping keeps one pending tick (its channel holds one),
// so a scrape that took longer than the interval is followed by the next
// at once.
func (rs *rounds) tick(ctx context.Context, r *round) {
	now := time.Now()
	timer := time.NewTimer(rs.next(r.phase, now).Sub(now))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		rs.mu.Lock()
		for w := range r.members {
			select {
			case w.tick <- struct{}{}:
			default:
			}
		}
		rs.mu.Unlock()
		now := time.Now()
		timer.Reset(rs.next(r.phase, now).Sub(now))
	}
}
