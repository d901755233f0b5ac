package poolimport

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
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
	apixv1alpha1 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha1"
)

// MaxClusters bounds the exporting cluster names read from one import
// (the CRD bounds the controllers, 8, but not their cluster lists).
const MaxClusters = 256

// Options configure a Source.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// Namespace and Name name the InferencePoolImport: the EPP's pool's.
	Namespace, Name string
	// Set receives the exporting clusters (sorted, unique) after every
	// change, nil when the import does not exist; required.
	Set func(clusters []string)
	// Logger receives the source's and controller-runtime's logs.
	Logger logr.Logger
}

// Validate reports every problem of the options.
func (o *Options) Validate() error {
	var errs []string
	if o.Config == nil {
		errs = append(errs, "no Kubernetes client configuration")
	}
	if o.Namespace == "" {
		errs = append(errs, "no namespace for the InferencePoolImport")
	}
	if o.Name == "" {
		errs = append(errs, "no InferencePoolImport name (the pool's, --pool-name)")
	}
	if o.Set == nil {
		errs = append(errs, "no Set function")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Source watches one InferencePoolImport.
type Source struct {
	opts   Options
	mgr    manager.Manager
	reader client.Reader
	log    logr.Logger
	last   []string
	known  bool
}

var key = types.NamespacedName{Name: "inferencepoolimport"}

func staticMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(apixv1alpha1.SchemeGroupVersion.WithKind("InferencePoolImport"), meta.RESTScopeNamespace)
	m.Add(apixv1alpha1.SchemeGroupVersion.WithKind("InferencePoolImportList"), meta.RESTScopeNamespace)
	return m, nil
}

// Scheme knows InferencePoolImport v1alpha1.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := apixv1alpha1.Install(s); err != nil {
		panic(err)
	}
	return s
}

// GroupVersionResource is what the source reads, for RBAC.
var GroupVersionResource = schema.GroupVersionResource{Group: apixv1alpha1.GroupName, Version: "v1alpha1", Resource: "inferencepoolimports"}

// New builds the manager and the controller; Run starts them.
func New(opts Options) (*Source, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	s := &Source{opts: opts, log: log}
	mgr, err := ctrl.NewManager(opts.Config, manager.Options{
		Scheme: Scheme(),
		Logger: log.WithName("controller-runtime"),
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&apixv1alpha1.InferencePoolImport{}: {Namespaces: map[string]cache.Config{opts.Namespace: {
					FieldSelector: fields.OneTermEqualSelector("metadata.name", opts.Name),
				}}},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
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
		return []reconcile.Request{{NamespacedName: key}}
	})
	// One pass after the cache synced, even if the import never appears
	// (its absence is reported too).
	kick := make(chan event.GenericEvent, 1)
	kick <- event.GenericEvent{Object: &apixv1alpha1.InferencePoolImport{}}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("switchyard-inferencepoolimport").
		Watches(&apixv1alpha1.InferencePoolImport{}, toKey).
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

// Run starts the manager; it blocks until ctx ends or the manager fails.
func (s *Source) Run(ctx context.Context) error { return s.mgr.Start(ctx) }

func (s *Source) reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var imp apixv1alpha1.InferencePoolImport
	err := s.reader.Get(ctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: s.opts.Name}, &imp)
	var clusters []string
	switch {
	case apierrors.IsNotFound(err) || err == nil && imp.DeletionTimestamp != nil:
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("get InferencePoolImport: %w", err)
	default:
		var truncated bool
		clusters, truncated = Clusters(&imp)
		if truncated {
			s.log.Info("InferencePoolImport lists too many exporting clusters; the first ones by name are used", "limit", MaxClusters)
		}
		if clusters == nil {
			clusters = []string{}
		}
	}
	if s.known && slices.Equal(clusters, s.last) && (clusters == nil) == (s.last == nil) {
		return reconcile.Result{}, nil
	}
	s.known, s.last = true, clusters
	if clusters == nil {
		s.log.Info("No InferencePoolImport for the pool: no exporting clusters", "inferencePoolImport", s.opts.Namespace+"/"+s.opts.Name)
	} else {
		s.log.Info("InferencePoolImport exporting clusters", "inferencePoolImport", s.opts.Namespace+"/"+s.opts.Name, "clusters", clusters)
	}
	s.opts.Set(slices.Clone(clusters))
	return reconcile.Result{}, nil
}

// Clusters returns the union of the import's exporting clusters over its
// controllers, sorted and unique, at most MaxClusters (the first by
// name); truncated reports whether some were left out.
func Clusters(imp *apixv1alpha1.InferencePoolImport) (clusters []string, truncated bool) {
	seen := map[string]bool{}
	for _, c := range imp.Status.Controllers {
		for _, ec := range c.ExportingClusters {
			if n := string(ec.Name); n != "" && !seen[n] {
				seen[n] = true
				clusters = append(clusters, n)
			}
		}
	}
	slices.Sort(clusters)
	if len(clusters) > MaxClusters {
		return clusters[:MaxClusters], true
	}
	return clusters, false
}
