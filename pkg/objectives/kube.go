package objectives

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// KubeOptions configure a KubeSource.
type KubeOptions struct {
	// Config reaches the API server.
	Config *rest.Config
	// Namespace is the pool's; PoolName and PoolGroup (default
	// DefaultPoolGroup) the pool objectives must reference.
	Namespace, PoolName, PoolGroup string
	// Set receives the table; required.
	Set *Set
	// Logger receives the source's and controller-runtime's logs.
	Logger logr.Logger
}

// Validate reports every problem of the options.
func (o *KubeOptions) Validate() error {
	var errs []string
	if o.Config == nil {
		errs = append(errs, "no Kubernetes client configuration")
	}
	if o.Namespace == "" {
		errs = append(errs, "no namespace for the InferenceObjectives")
	}
	if o.PoolName == "" {
		errs = append(errs, "no pool name (--pool-name)")
	}
	if o.Set == nil {
		errs = append(errs, "no Set")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// KubeSource watches the InferenceObjectives of one namespace.
type KubeSource struct {
	opts   KubeOptions
	mgr    manager.Manager
	reader client.Reader
	log    logr.Logger
	capped bool
}

var kubeKey = types.NamespacedName{Name: "inferenceobjectives"}

func staticMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(GroupVersion.WithKind("InferenceObjective"), meta.RESTScopeNamespace)
	m.Add(GroupVersion.WithKind("InferenceObjectiveList"), meta.RESTScopeNamespace)
	return m, nil
}

// NewKubeSource builds the manager and the controller; Run starts them.
func NewKubeSource(opts KubeOptions) (*KubeSource, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.PoolGroup == "" {
		opts.PoolGroup = DefaultPoolGroup
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	s := &KubeSource{opts: opts, log: log}
	mgr, err := ctrl.NewManager(opts.Config, manager.Options{
		Scheme: Scheme(),
		Logger: log.WithName("controller-runtime"),
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
		},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider:         staticMapper,
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	s.mgr = mgr
	s.reader = mgr.GetCache()
	toKey := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: kubeKey}}
	})
	// One pass once the cache synced, even with no objective at all.
	kick := make(chan event.GenericEvent, 1)
	kick <- event.GenericEvent{Object: &InferenceObjective{}}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("switchyard-inferenceobjective").
		Watches(&InferenceObjective{}, toKey).
		WatchesRawSource(source.Channel(kick, toKey)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			CacheSyncTimeout:        100 * 365 * 24 * time.Hour,
			SkipNameValidation:      ptr.To(true),
			NeedLeaderElection:      ptr.To(false),
		}).
		Complete(reconcile.Func(s.reconcile))
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	return s, nil
}

// CRDCheckInterval is how often Run looks again for the InferenceObjective
// API while the API server does not serve it (the CRD is not installed).
var CRDCheckInterval = 30 * time.Second

// Run starts the manager; it blocks until ctx ends or the manager fails.
// While the API server does not serve InferenceObjectives (the CRD is not
// installed: discovery answers 404) it logs that once, leaves the table
// empty (every request has priority 0) and looks again every
// CRDCheckInterval, so a missing CRD is neither a crash nor a stream of
// list errors; any other discovery answer starts the watch.
func (s *KubeSource) Run(ctx context.Context) error {
	dc, err := discovery.NewDiscoveryClientForConfig(s.opts.Config)
	if err == nil {
		logged := false
		for {
			_, err := dc.ServerResourcesForGroupVersion(GroupVersion.String())
			if !apierrors.IsNotFound(err) {
				break
			}
			if !logged {
				s.log.Info("The API server does not serve InferenceObjectives (CRD inferenceobjectives.inference.networking.x-k8s.io not installed); every request has priority 0 until it is", "recheck", CRDCheckInterval)
				logged = true
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(CRDCheckInterval):
			}
		}
		if logged {
			s.log.Info("InferenceObjectives are served now; watching them")
		}
	}
	return s.mgr.Start(ctx)
}

// reconcile recomputes the whole table from the cache: events coalesce in
// the work queue, so a burst costs one pass.
func (s *KubeSource) reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var list InferenceObjectiveList
	if err := s.reader.List(ctx, &list, client.InNamespace(s.opts.Namespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("list InferenceObjectives: %w", err)
	}
	t, capped := Build(list.Items, s.opts.PoolName, s.opts.PoolGroup)
	if capped && !s.capped {
		s.log.Info("More InferenceObjectives reference the pool than the EPP keeps; the first ones by name are used", "limit", MaxObjectives)
	}
	s.capped = capped
	if old := s.opts.Set.Table(); old != nil && old.Equal(t) {
		return reconcile.Result{}, nil
	}
	s.opts.Set.Store(t)
	s.log.V(1).Info("InferenceObjectives", "namespace", s.opts.Namespace, "objectives", t.Len())
	return reconcile.Result{}, nil
}

// Build returns the table of the objectives that reference the pool
// (spec.poolRef name and group, the group defaulting to
// DefaultPoolGroup) and are not being deleted; at most MaxObjectives,
// the first by name (capped reports whether some were left out).
func Build(items []InferenceObjective, pool, group string) (t *Table, capped bool) {
	if group == "" {
		group = DefaultPoolGroup
	}
	keep := make([]*InferenceObjective, 0, len(items))
	for i := range items {
		o := &items[i]
		g := o.Spec.PoolRef.Group
		if g == "" {
			g = DefaultPoolGroup
		}
		if o.DeletionTimestamp != nil || o.Spec.PoolRef.Name != pool || g != group {
			continue
		}
		keep = append(keep, o)
	}
	slices.SortFunc(keep, func(a, b *InferenceObjective) int { return strings.Compare(a.Name, b.Name) })
	if len(keep) > MaxObjectives {
		keep, capped = keep[:MaxObjectives], true
	}
	m := make(map[string]int, len(keep))
	for _, o := range keep {
		p := 0
		if o.Spec.Priority != nil {
			p = *o.Spec.Priority
		}
		m[o.Name] = p
	}
	return &Table{m: m}, capped
}
