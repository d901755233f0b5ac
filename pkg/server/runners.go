package server

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// stopTracing flushes the spans still queued and stops the exporters,
// within TracingShutdownTimeout; Run calls it once nothing serves.
func (s *Server) stopTracing() {
	if s.tracing == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), TracingShutdownTimeout)
	defer cancel()
	t0 := time.Now()
	if err := s.tracing.Shutdown(ctx); err != nil {
		s.log.Error(err, "Tracing: spans still queued at shutdown were not exported", "waited", time.Since(t0).Round(time.Millisecond))
	}
	s.tracing = nil
}

// storeEnv is the RunEnv of the plugins' background work: the pool as the
// store publishes it.
type storeEnv struct{ store *datastore.Store }

// Endpoints implements scheduling.RunEnv.
func (e storeEnv) Endpoints() []*scheduling.Endpoint { return e.store.Snapshot().All() }

// Changed implements scheduling.RunEnv.
func (e storeEnv) Changed() <-chan struct{} { return e.store.Changed() }

// runner is one running scheduling.Runner instance.
type runner struct {
	plugin scheduling.Runner
	cancel context.CancelFunc
}

// runners runs the scheduling.Runner instances of the serving
// configuration (active health checks): each on a goroutine of its own,
// started once the configuration that built it serves, stopped when the
// instance is dropped (a reload that did not keep it) or the server stops.
// Instances a reload kept keep running. Nothing runs before Server.Run,
// so `epp validate` and a server that never serves start none.
type runners struct {
	env scheduling.RunEnv

	mu      sync.Mutex
	ctx     context.Context // nil until Run
	wg      sync.WaitGroup
	running map[string]*runner
}

func newRunners(env scheduling.RunEnv) *runners {
	return &runners{env: env, running: map[string]*runner{}}
}

// start begins running: the instances of l start under ctx, which ends
// them all.
func (r *runners) start(ctx context.Context, l *config.Loaded) {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	r.sync(l)
}

// sync makes the running instances those of l: instances l took over keep
// running, new ones start, the others stop. Before start it does nothing.
func (r *runners) sync(l *config.Loaded) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || r.ctx.Err() != nil {
		return
	}
	r.prepare(l)
	want := map[string]scheduling.Runner{}
	for name, p := range l.Plugins {
		if rp, ok := p.(scheduling.Runner); ok {
			want[name] = rp
		}
	}
	for name, cur := range r.running {
		if p, ok := want[name]; !ok || !samePlugin(p, cur.plugin) {
			cur.cancel() // dropped; its instance's Close follows
			delete(r.running, name)
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := r.running[name]; ok {
			continue // kept by the reload: it keeps running
		}
		ctx, cancel := context.WithCancel(r.ctx)
		p := want[name]
		r.running[name] = &runner{plugin: p, cancel: cancel}
		r.wg.Go(func() { p.Run(ctx, r.env) })
	}
}

// prepare hands the env to l's instances that want it before l serves
// (scheduling.RunEnvSetter), synchronously: their Run goroutines may
// start after the first requests. Kept instances get the same env again.
func (r *runners) prepare(l *config.Loaded) {
	for _, p := range l.Plugins {
		if s, ok := p.(scheduling.RunEnvSetter); ok {
			s.SetRunEnv(r.env)
		}
	}
}

// wait waits for every instance to return (after the context given to
// start ended).
func (r *runners) wait() { r.wg.Wait() }

// names returns the running instances' names, sorted.
func (r *runners) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.running))
	for n := range r.running {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// samePlugin reports whether a and b are the same instance (a kept one is
// the same value in both configurations).
func samePlugin(a, b scheduling.Runner) (same bool) {
	defer func() {
		if recover() != nil { // a non-comparable plugin type
			same = false
		}
	}()
	return a == b
}
