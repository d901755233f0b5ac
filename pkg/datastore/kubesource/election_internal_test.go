package kubesource

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// memLock is an in-memory Lease for unit tests of the election's timing
// (the real Lease is exercised against kube-apiserver in test/e2e). With
// hang set, every call blocks until its context ends, as calls to an API
// server behind a dead connection do.
type memLock struct {
	id   string
	mu   sync.Mutex
	rec  *resourcelock.LeaderElectionRecord
	hang bool
}

func (l *memLock) wait(ctx context.Context) error {
	l.mu.Lock()
	hang := l.hang
	l.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (l *memLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if err := l.wait(ctx); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rec == nil {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "lease")
	}
	r := *l.rec
	return &r, []byte(r.HolderIdentity + r.RenewTime.String()), nil
}

func (l *memLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rec != nil {
		return errors.New("exists")
	}
	l.rec = &r
	return nil
}

func (l *memLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec = &r
	return nil
}

func (l *memLock) RecordEvent(string) {}
func (l *memLock) Identity() string   { return l.id }
func (l *memLock) Describe() string   { return "test/lease" }
func (l *memLock) holder() string     { l.mu.Lock(); defer l.mu.Unlock(); return l.rec.HolderIdentity }
func (l *memLock) setHang(h bool)     { l.mu.Lock(); l.hang = h; l.mu.Unlock() }
func (l *memLock) durationSeconds() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.LeaseDurationSeconds
}

// A leader whose renewals hang (a dead connection to the API server) stops
// being ready within the renew deadline, before a standby could take the
// lease (a lease duration after the last renewal), and keeps campaigning.
// On shutdown a held lease is released.
func TestElectionStepsDownBeforeTheLeaseExpires(t *testing.T) {
	const (
		ld = 3 * time.Second
		rd = 2 * time.Second
		rp = 100 * time.Millisecond
	)
	lock := &memLock{id: "a"}
	e, err := newElectionWithLock(lock, "a", "test/lease", ld, rd, rp, logr.Discard())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.run(ctx) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, e.leading, 5*time.Second, 10*time.Millisecond)
	lock.setHang(true)
	hungAt := time.Now()
	require.Eventually(t, func() bool { return !e.leading() }, ld, 10*time.Millisecond,
		"not ready before the lease could pass to another replica")
	took := time.Since(hungAt)
	require.Less(t, took, ld)
	t.Logf("stepped down %s after renewals started hanging (renew deadline %s, lease %s)", took.Round(time.Millisecond), rd, ld)

	// The API server answers again: the replica leads again.
	lock.setHang(false)
	require.Eventually(t, e.leading, 5*time.Second, 10*time.Millisecond, "campaigns again after the lost term")

	cancel()
	<-done
	require.False(t, e.leading())
	require.Empty(t, lock.holder(), "released on shutdown")
	require.Equal(t, 1, lock.durationSeconds())
}

// Shutdown does not clear a lease that another replica holds.
func TestElectionReleasesOnlyItsOwnLease(t *testing.T) {
	lock := &memLock{id: "a", rec: &resourcelock.LeaderElectionRecord{HolderIdentity: "b", LeaseDurationSeconds: 3600}}
	e, err := newElectionWithLock(lock, "a", "test/lease", 3*time.Second, 2*time.Second, 100*time.Millisecond, logr.Discard())
	require.NoError(t, err)
	e.release()
	require.Equal(t, "b", lock.holder())
	require.Equal(t, 3600, lock.durationSeconds())
}
