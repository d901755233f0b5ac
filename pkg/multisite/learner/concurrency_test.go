package learner

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStepConcurrentWithReaders: steps from several goroutines (a poll
// and a tick) serialize; readers of the Holder see whole snapshots with
// increasing versions; a published snapshot never changes (run with
// -race).
func TestStepConcurrentWithReaders(t *testing.T) {
	r := newRig(t, shedding(), fakeHealth{}, modelPeers()...)
	learn(r)
	first := r.l.Holder().Load()
	firstCopy := *first
	firstSites := append(firstCopy.Sites[:0:0], first.Sites...)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				at := t0.Add(time.Duration(i) * time.Millisecond)
				r.store.Ingest(batch("a", "p", 1, at, atLimit), at, at)
				r.l.Step(at, r.top, r.store.Snapshot())
				r.l.SetSettings(shedding())
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			sn := r.l.Holder().Load()
			if !assert.GreaterOrEqual(t, sn.Version, last) || !assert.Len(t, sn.Sites, 3) {
				return
			}
			last = sn.Version
			_ = sn.Shedding("m1")
		}
	}()
	time.Sleep(50 * time.Millisecond)
	for r.l.Holder().Load().Version < first.Version+400 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// %v prints NaN alike (Equal would find NaN unequal to itself).
	require.Equal(t, fmt.Sprintf("%v", firstSites), fmt.Sprintf("%v", first.Sites), "a published snapshot never changes")
}
