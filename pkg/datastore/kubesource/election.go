package kubesource

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
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
	cfg   leaderelection.LeaderElectionConfig
	log   logr.Logger
	mu    sync.Mutex
	lead  bool
	terms int // leaderships won, for logs and tests
}

func newElection(restCfg *rest.Config, namespace, name string, ld, rd, rp time.Duration, log logr.Logger) (*election, error) {
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(restCfg))
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
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	e := &election{log: log.WithValues("lease", namespace+"/"+name, "identity", id)}
	e.cfg = leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            name,
		LeaseDuration:   ld,
		RenewDeadline:   rd,
		RetryPeriod:     rp,
		ReleaseOnCancel: true,
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

// leading reports whether this replica holds the lease.
func (e *election) leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lead
}

// run campaigns until ctx ends: acquire, renew until lost, then campaign
// again after one retry period. On ctx's end a held lease is released.
func (e *election) run(ctx context.Context) {
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(e.cfg)
		if err != nil { // the configuration was checked in newElection
			e.log.Error(err, "Leader election stopped")
			return
		}
		le.Run(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(e.cfg.RetryPeriod):
		}
	}
}
