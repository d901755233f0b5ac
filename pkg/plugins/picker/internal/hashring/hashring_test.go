package hashring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func pool(prefix string, n int) []scheduling.ScoredEndpoint {
	out := make([]scheduling.ScoredEndpoint, n)
	for i := range out {
		out[i] = scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint(fmt.Sprintf("%s-%04d", prefix, i)).Build()}
	}
	return out
}

// bruteOrder is the reference: the candidates ordered by the clockwise
// distance from h to their nearest point (ties by key, as the ring
// orders colliding points).
func bruteOrder(scored []scheduling.ScoredEndpoint, vnodes int, h uint64) []string {
	type c struct {
		d   uint64
		key string
	}
	var cs []c
	for _, s := range scored {
		kh := xxhash.Sum64String(s.Endpoint.Key())
		best := ^uint64(0)
		for v := range vnodes {
			best = min(best, PointHash(kh, v)-h)
		}
		cs = append(cs, c{best, s.Endpoint.Key()})
	}
	slices.SortFunc(cs, func(a, b c) int {
		if a.d != b.d {
			if a.d < b.d {
				return -1
			}
			return 1
		}
		if a.key < b.key {
			return -1
		}
		return 1
	})
	out := make([]string, len(cs))
	for i, x := range cs {
		out[i] = x.key
	}
	return out
}

func walk(v *View, scored []scheduling.ScoredEndpoint) []string {
	var out []string
	for i := v.Next(); i >= 0; i = v.Next() {
		out = append(out, scored[i].Endpoint.Key())
	}
	return out
}

// The walk over the pool's ring returns every candidate once, in the
// order of their nearest point clockwise of the key, whether it stays on
// the ring or switches to ranking (budget 0: at once; 3: midway).
func TestWalkOrder(t *testing.T) {
	all := pool("ep", 300)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, budget := range [][2]int{{64, 8}, {0, 0}, {3, 0}} {
		t.Run(fmt.Sprintf("budget %d+%d", budget[0], budget[1]), func(t *testing.T) {
			budgetBase, budgetScale = budget[0], budget[1]
			defer func() { budgetBase, budgetScale = 64, 8 }()
			c := NewCache(7, nil, nil)
			var v View
			c.View(all, &v)
			for trial := range 200 {
				k := 1 + rng.IntN(len(all))
				if trial%2 == 0 {
					k = 1 + rng.IntN(5)
				}
				sub := make([]scheduling.ScoredEndpoint, k)
				for i, j := range rng.Perm(len(all))[:k] {
					sub[i] = all[j]
				}
				c.View(sub, &v)
				h := rng.Uint64()
				v.Start(h)
				got, want := walk(&v, sub), bruteOrder(sub, 7, h)
				if !slices.Equal(got, want) {
					t.Fatalf("trial %d (%d candidates): walk %v, want %v", trial, k, got, want)
				}
			}
			if c.Builds() != 1 {
				t.Errorf("builds = %d, want 1", c.Builds())
			}
		})
	}
}

// Duplicated candidates are visited once; a candidate not on the ring
// rebuilds it over the union.
func TestViewMapping(t *testing.T) {
	c := NewCache(5, nil, nil)
	a := pool("a", 4)
	var v View
	c.View(append(slices.Clone(a), a[1]), &v)
	if v.Candidates() != 4 {
		t.Errorf("candidates = %d, want 4 distinct", v.Candidates())
	}
	v.Start(42)
	if got := walk(&v, a); len(got) != 4 {
		t.Errorf("walk %v, want each of four once", got)
	}
	b := pool("b", 2)
	c.View(b, &v)
	if c.Builds() != 2 || c.Ring().Members() != 6 {
		t.Errorf("builds %d, members %d; want 2, 6 (the union)", c.Builds(), c.Ring().Members())
	}
}

// Members that stop being candidates leave the ring at the next rebuild
// after MemberTTL, and at most maxRetained of them are kept: under churn
// the ring stays bounded.
func TestRetentionBounded(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	c := NewCache(3, func() time.Time { return clock }, nil)
	c.maxRetained = 50
	var v View
	for gen := range 100 { // 100 generations of 10 new endpoints each
		c.View(pool(fmt.Sprintf("g%03d", gen), 10), &v)
		clock = clock.Add(time.Second)
		if m := c.Ring().Members(); m > 10+50 {
			t.Fatalf("generation %d: %d members, want at most 60", gen, m)
		}
	}
	clock = clock.Add(MemberTTL + time.Second)
	c.View(pool("last", 3), &v)
	if m := c.Ring().Members(); m != 3 {
		t.Errorf("after the TTL: %d members, want only the 3 candidates", m)
	}
}

// TestShrinksAfterScaleDown: after the pool shrinks to a subset of the
// ring (no new endpoint, so no rebuild for one), the ring is pruned once
// MemberTTL has passed, and not before; picks never change.
func TestShrinksAfterScaleDown(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	c := NewCache(3, func() time.Time { return clock }, nil)
	var v View
	big := pool("ep", 500)
	c.View(big, &v)
	small := big[:20]
	c.View(small, &v)
	builds := c.Builds()
	for i := range 12 {
		clock = clock.Add(time.Minute)
		c.View(small, &v)
		if c.Ring().Members() == 20 {
			if i < 10 {
				t.Fatalf("pruned after %d minutes, before MemberTTL", i+1)
			}
			break
		}
	}
	if m := c.Ring().Members(); m != 20 {
		t.Fatalf("%d members after the TTL, want the 20 candidates", m)
	}
	if got := c.Builds() - builds; got != 1 {
		t.Errorf("%d rebuilds, want 1", got)
	}
	for range 100 {
		clock = clock.Add(time.Second)
		c.View(small, &v)
	}
	if got := c.Builds() - builds; got != 1 {
		t.Errorf("%d rebuilds while the ring fits, want 1", got)
	}
	want := Build(candidateMembers(small), 3)
	var w View
	w.mapOnto(want, small, clock.Unix())
	for k := range uint64(200) {
		v.Start(k * 0x9e3779b97f4a7c15)
		w.Start(k * 0x9e3779b97f4a7c15)
		if a, b := v.Next(), w.Next(); a != b {
			t.Fatalf("key %d: %d on the pruned ring, %d on the candidates' ring", k, a, b)
		}
	}
}

// TestNoPruneWhileThePoolIsSeen: a filtered subset far smaller than the
// ring, beside whole-pool requests that keep every member seen, never
// rebuilds the ring (nothing to prune), so it keeps the pool's order.
func TestNoPruneWhileThePoolIsSeen(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	c := NewCache(3, func() time.Time { return clock }, nil)
	var v View
	all := pool("ep", 500)
	c.View(all, &v)
	builds := c.Builds()
	for range 120 { // an hour, every 30 s
		clock = clock.Add(30 * time.Second)
		c.View(all, &v)
		c.View(all[100:120], &v)
	}
	if got := c.Builds() - builds; got != 0 {
		t.Errorf("%d rebuilds, want none", got)
	}
	if m := c.Ring().Members(); m != 500 {
		t.Errorf("%d members, want 500", m)
	}
}

func BenchmarkView(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			all := pool("ep", n)
			c := NewCache(150, nil, nil)
			var v View
			c.View(all, &v)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c.View(all, &v)
				v.Start(uint64(i) * 0x9e3779b97f4a7c15)
				v.Next()
			}
		})
	}
}

// Two keys whose 64-bit hashes collide are both members and both found.
func TestHashCollision(t *testing.T) {
	r := Build([]Member{{KeyHash: 7, Key: "a"}, {KeyHash: 7, Key: "b"}, {KeyHash: 8, Key: "c"}}, 4)
	for _, tt := range []struct {
		kh   uint64
		key  string
		want int
	}{{7, "a", 0}, {7, "b", 1}, {8, "c", 2}, {7, "c", -1}, {9, "a", -1}} {
		if got := r.find(tt.kh, tt.key); got != tt.want {
			t.Errorf("find(%d, %q) = %d, want %d", tt.kh, tt.key, got, tt.want)
		}
	}
	if r.Points() != 12 || r.Members() != 3 {
		t.Errorf("points %d, members %d", r.Points(), r.Members())
	}
}
