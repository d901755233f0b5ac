package kubesource

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// election is active-passive leader election on a Lease. Unlike a
// controller-runtime manager's, losing the lease does not stop the
// process: the replica turns not ready and campaigns again, so an
// API-server outage longer than the renew deadline ends with a leader
// elected within one retry period of the API server's return, not with
// every replica restarting (and crash-looping while the API server is
// away).
type election struct {
	cfg  leaderelection.LeaderElectionConfig
	lock resourcelock.Interface
	id   string
	log  logr.Logger

	mu    sync.Mutex
	lead  bool
	le    *leaderelection.LeaderElector // the current term's
	terms int                           // leaderships won, for logs
}

func newElection(restCfg *rest.Config, namespace, name string, ld, rd, rp time.Duration, log logr.Logger) (*election, error) {
	core, err := corev1client.NewForConfig(rest.CopyConfig(restCfg))
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	coord, err := coordinationv1client.NewForConfig(rest.CopyConfig(restCfg))
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	id := os.Getenv("POD_NAME")
	if id == "" {
		if id, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("leader election identity: %w", err)
		}
	}
	id += "_" + string(uuid.NewUUID())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, core, coord,
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return newElectionWithLock(lock, id, namespace+"/"+name, ld, rd, rp, log)
}

// newElectionWithLock is newElection on a given lock.
func newElectionWithLock(lock resourcelock.Interface, id, name string, ld, rd, rp time.Duration, log logr.Logger) (*election, error) {
	e := &election{lock: lock, id: id, log: log.WithValues("lease", name, "identity", id)}
	e.cfg = leaderelection.LeaderElectionConfig{
		Lock:          lock,
		Name:          name,
		LeaseDuration: ld,
		RenewDeadline: rd,
		RetryPeriod:   rp,
		// client-go's release also runs after a failed renewal, with a
		// stale view of the Lease, and could clear a successor's hold;
		// run releases only on shutdown, and only its own hold (release).
		ReleaseOnCancel: false,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: e.started,
			OnStoppedLeading: e.stopped,
		},
	}
	// Checks the timings (retry < renew < lease) once, up front.
	if _, err := leaderelection.NewLeaderElector(e.cfg); err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	return e, nil
}

// started runs in its own goroutine; ctx is cancelled before stopped runs,
// so a late start after a lost term does not mark this replica leader.
func (e *election) started(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() == nil {
		e.lead = true
		e.terms++
		e.log.Info("Leader elected: this replica serves", "term", e.terms)
	}
}

func (e *election) stopped() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lead {
		e.log.Info("Leadership lost or released: this replica stops serving and campaigns again")
	}
	e.lead = false
}

// leading reports whether this replica holds the lease: it won the term
// and its last successful renewal is less than the renew deadline old (a
// leader whose renewals hang stops being ready before a successor can take
// the lease, which needs a whole lease duration).
func (e *election) leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lead && e.le != nil && e.le.Check(e.cfg.RenewDeadline-e.cfg.LeaseDuration) == nil
}

// run campaigns until ctx ends: acquire, renew until lost, then campaign
// again after one retry period. When ctx ends, a lease this replica still
// holds is released, so a standby takes over at its next attempt.
func (e *election) run(ctx context.Context) {
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(e.cfg)
		if err != nil { // the configuration was checked in newElection
			e.log.Error(err, "Leader election stopped")
			return
		}
		e.mu.Lock()
		e.le = le
		e.mu.Unlock()
		le.Run(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(e.cfg.RetryPeriod):
		}
	}
	e.release()
}

// release gives the lease up if this replica holds it, on a fresh read (an
// update with that read's version fails if anyone changed it since).
func (e *election) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	rec, _, err := e.lock.Get(ctx)
	if err != nil || rec.HolderIdentity != e.id {
		return
	}
	now := metav1.NewTime(time.Now())
	err = e.lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaseDurationSeconds: 1, LeaderTransitions: rec.LeaderTransitions, RenewTime: now, AcquireTime: now,
	})
	if err != nil {
		e.log.Error(err, "Cannot release the lease; a standby takes over when it expires")
		return
	}
	e.log.Info("Lease released")
}
