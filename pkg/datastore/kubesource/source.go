package kubesource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
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
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

// PoolGroup is the only InferencePool API group served:
// inference.networking.k8s.io (v1).
const PoolGroup = "inference.networking.k8s.io"

// Leader-election defaults (controller-runtime's).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Options configure a Source. Exactly one of PoolName and Selector is set.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// Namespace is the pool's namespace (and the pods').
	Namespace string
	// PoolName names the InferencePool (pool mode).
	PoolName string
	// PoolGroup is the pool's API group; "" means PoolGroup.
	PoolGroup string
	// Selector selects the pods without the CRD (--endpoint-selector).
	Selector labels.Selector
	// TargetPorts are the ports of Selector mode (--endpoint-target-ports).
	TargetPorts []int
	// MetricsPort, when not 0, is the metrics port of pools with a single
	// target port (the deprecated --model-server-metrics-port).
	MetricsPort int
	// LeaderElection turns on active-passive leader election.
	LeaderElection bool
	// LeaderElectionID names the Lease; "" means GIE's name for the pool
	// ("epp-<namespace>-<name>.gateway-api-inference-extension.sigs.k8s.io"),
	// so that GIE and Switchyard replicas of one pool never both lead.
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election;
	// zero means the defaults (15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Logger receives the source's and controller-runtime's logs.
	Logger logr.Logger
}

// Source keeps a datastore in sync with the pool. It implements
// pkg/server's EndpointSource.
type Source struct {
	opts   Options
	store  *datastore.Store
	mgr    manager.Manager
	reader client.Reader
	log    logr.Logger
	kick   chan event.GenericEvent
	elect  *election // nil without leader election
	// waitLogged: "waiting for the InferencePool" was logged since the
	// pool was last seen (reconciles run one at a time).
	waitLogged bool
	// annotations reads the pods' switchyard.ai annotations; logged holds
	// the invalid values logged (pod and annotation → value hash), so each
	// is logged once while it stays.
	annotations *annotationReader
	logged      map[string]uint64
}

// key is the one work-queue item: every change recomputes the whole set.
var key = types.NamespacedName{Name: "endpoints"}

// staticMapper maps the two kinds the source reads, so that the manager
// needs no API discovery at start.
func staticMapper(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Pod"), corev1.SchemeGroupVersion.WithKind("PodList"),
		infv1.SchemeGroupVersion.WithKind("InferencePool"), infv1.SchemeGroupVersion.WithKind("InferencePoolList"),
	} {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	return m, nil
}

// scheme knows core/v1 and InferencePool v1.
func scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := infv1.Install(s); err != nil {
		panic(err)
	}
	return s
}

// Validate reports every problem of the options.
func (o *Options) Validate() error {
	var errs []string
	if o.Config == nil {
		errs = append(errs, "no Kubernetes client configuration")
	}
	if o.Namespace == "" {
		errs = append(errs, "--pool-namespace: empty (and $NAMESPACE is not set)")
	}
	switch {
	case o.PoolName == "" && o.Selector == nil:
		errs = append(errs, "give --pool-name or --endpoint-selector")
	case o.PoolName != "" && o.Selector != nil:
		errs = append(errs, "--pool-name and --endpoint-selector are mutually exclusive")
	case o.Selector != nil:
		if o.Selector.Empty() {
			errs = append(errs, "--endpoint-selector: selects every pod of the namespace; give at least one label")
		}
		switch n := len(o.TargetPorts); {
		case n == 0:
			errs = append(errs, "--endpoint-target-ports: needed with --endpoint-selector")
		case n > MaxTargetPorts:
			errs = append(errs, fmt.Sprintf("--endpoint-target-ports: %d ports, at most %d (as InferencePool.spec.targetPorts)", n, MaxTargetPorts))
		}
		seen := map[int]bool{}
		for i, p := range o.TargetPorts {
			if p < 1 || p > 65535 {
				errs = append(errs, fmt.Sprintf("--endpoint-target-ports[%d]: %d is not a port (1..65535)", i, p))
			}
			if seen[p] {
				errs = append(errs, fmt.Sprintf("--endpoint-target-ports[%d]: %d is listed twice", i, p))
			}
			seen[p] = true
		}
	}
	if o.PoolGroup != "" && o.PoolGroup != PoolGroup {
		msg := fmt.Sprintf("--pool-group: %q is not served; Switchyard reads InferencePool %s/v1", o.PoolGroup, PoolGroup)
		if o.PoolGroup == "inference.networking.x-k8s.io" {
			msg += " (the v1alpha2 pool of inference.networking.x-k8s.io was replaced by v1; migrate the pool)"
		}
		errs = append(errs, msg)
	}
	if o.MetricsPort < 0 || o.MetricsPort > 65535 {
		errs = append(errs, fmt.Sprintf("--model-server-metrics-port: %d is not a port", o.MetricsPort))
	}
	if o.LeaderElection && o.PoolName == "" && o.LeaderElectionID == "" {
		if _, ok := DeploymentName(os.Getenv("POD_NAME")); !ok {
			errs = append(errs, fmt.Sprintf("--ha-enable-leader-election with --endpoint-selector names the lease after the Deployment, read from POD_NAME (downward API), which must look like <deployment>-<hash>-<suffix>; got %q (or give --ha-lease-name)", os.Getenv("POD_NAME")))
		}
	}
	if o.LeaderElection {
		ld, rd, rp := o.leaseTimes()
		switch {
		case ld < time.Second || ld%time.Second != 0:
			// A Lease records whole seconds.
			errs = append(errs, fmt.Sprintf("--ha-lease-duration: %s is not a whole number of seconds (at least 1s)", ld))
		case !(rd < ld):
			errs = append(errs, fmt.Sprintf("leader election: need renew deadline (%s) < lease duration (%s)", rd, ld))
		case float64(rd) <= leaderelection.JitterFactor*float64(rp):
			errs = append(errs, fmt.Sprintf("leader election: need renew deadline (%s) > %.1f × retry period (%s)", rd, leaderelection.JitterFactor, rp))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func (o *Options) leaseTimes() (ld, rd, rp time.Duration) {
	ld, rd, rp = o.LeaseDuration, o.RenewDeadline, o.RetryPeriod
	if ld <= 0 {
		ld = DefaultLeaseDuration
	}
	if rd <= 0 {
		rd = DefaultRenewDeadline
	}
	if rp <= 0 {
		rp = DefaultRetryPeriod
	}
	return ld, rd, rp
}

// leaseName is the Lease's name.
func (o *Options) leaseName() string {
	if o.LeaderElectionID != "" {
		return o.LeaderElectionID
	}
	name := o.PoolName
	if name == "" {
		name, _ = DeploymentName(os.Getenv("POD_NAME"))
	}
	return fmt.Sprintf("epp-%s-%s.gateway-api-inference-extension.sigs.k8s.io", o.Namespace, name)
}

// deploymentPod is a Deployment's pod name: <deployment>-<pod-template
// hash>-<5 characters>, both from Kubernetes' safe alphabet (no vowels,
// no 0, 1 or 3), so a StatefulSet's "my-epp-0" does not match.
var deploymentPod = regexp.MustCompile(`^(.+)-[bcdfghjklmnpqrstvwxz2456789]{1,10}-[bcdfghjklmnpqrstvwxz2456789]{5}$`)

// DeploymentName returns the Deployment of a pod name
// ("epp-7d9f8c6b5-x2x9z" → "epp"), as GIE reads it; ok is false for a
// name that is not a Deployment's pod's (a StatefulSet's "epp-0"), which
// would give every replica its own lease.
func DeploymentName(pod string) (string, bool) {
	m := deploymentPod.FindStringSubmatch(pod)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// MaxTargetPorts is the most target ports a pool has (the CRD's limit).
const MaxTargetPorts = 8

// ActivePortsAnnotation lists, comma-separated, the target ports of a pod
// that serve (data-parallel ranks that are up); without it every target
// port does. GIE's annotation.
const ActivePortsAnnotation = "inference.networking.k8s.io/active-ports"

// New builds the manager and the controller; Run starts them.
func New(store *datastore.Store, opts Options) (*Source, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.PoolGroup == "" {
		opts.PoolGroup = PoolGroup
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	s := &Source{opts: opts, store: store, log: log, kick: make(chan event.GenericEvent, 1),
		annotations: newAnnotationReader(), logged: map[string]uint64{}}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}, Transform: TrimPod},
	}
	if opts.PoolName != "" {
		byObject[&infv1.InferencePool{}] = cache.ByObject{Namespaces: map[string]cache.Config{opts.Namespace: {
			FieldSelector: fields.OneTermEqualSelector("metadata.name", opts.PoolName),
		}}}
	}
	mopts := manager.Options{
		Scheme: scheme(),
		Logger: log.WithName("controller-runtime"),
		Cache: cache.Options{
			ByObject: byObject,
			// Only what the endpoint set is made of is kept in memory.
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		Metrics:                metricsserver.Options{BindAddress: "0"}, // served on the EPP's own metrics port
		HealthProbeBindAddress: "0",
		// The mapping of the two kinds watched is known; without discovery
		// the process starts (not ready) while the API server is away.
		MapperProvider: staticMapper,
		// Leader election is the source's own (see election): losing the
		// lease must not stop the manager.
		LeaderElection: false,
	}
	mgr, err := ctrl.NewManager(opts.Config, mopts)
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	s.mgr = mgr
	s.reader = mgr.GetCache()
	toKey := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: key}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("switchyard-endpoints").
		Watches(&corev1.Pod{}, toKey).
		WatchesRawSource(source.Channel(s.kick, toKey)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			// The caches sync when the API server answers, however late:
			// controller-runtime's 2-minute default would stop an EPP that
			// started during an API-server outage.
			CacheSyncTimeout: 100 * 365 * 24 * time.Hour,
			// One controller per source; tests (and embedders) may run
			// several sources in one process.
			SkipNameValidation: ptr.To(true),
			// Every replica keeps its endpoint set warm; only readiness
			// follows leadership.
			NeedLeaderElection: ptr.To(false),
		})
	if opts.PoolName != "" {
		b = b.Watches(&infv1.InferencePool{}, toKey)
	}
	if err := b.Complete(reconcile.Func(s.reconcile)); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	// One pass after the caches synced, even if nothing in them changes
	// (an empty selector-mode pool is still a synced pool).
	s.kick <- event.GenericEvent{Object: &corev1.Pod{}}
	if opts.LeaderElection {
		ld, rd, rp := opts.leaseTimes()
		if s.elect, err = newElection(opts.Config, opts.Namespace, opts.leaseName(), ld, rd, rp, log.WithName("leader-election")); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run starts the manager (caches and controller) and, with leader
// election, campaigns for the lease; it blocks until ctx ends or the
// manager fails. Losing the lease is not a failure: the replica turns not
// ready and campaigns again.
func (s *Source) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var elected sync.WaitGroup
	if s.elect != nil {
		elected.Add(1)
		go func() { defer elected.Done(); s.elect.run(ctx) }()
	}
	err := s.mgr.Start(ctx)
	cancel()
	elected.Wait()
	return err
}

// Ready reports whether this replica may serve: always without leader
// election, while it holds the lease with it.
func (s *Source) Ready() bool { return s.elect == nil || s.elect.leading() }

// Describe returns the source's key/value pairs for the start-up log.
func (s *Source) Describe() []any {
	kv := []any{"namespace", s.opts.Namespace}
	if s.opts.PoolName != "" {
		kv = append(kv, "inferencePool", s.opts.PoolName)
	} else {
		kv = append(kv, "endpointSelector", s.opts.Selector.String(), "targetPorts", s.opts.TargetPorts)
	}
	if s.opts.LeaderElection {
		kv = append(kv, "leaderElection", s.opts.Namespace+"/"+s.opts.leaseName())
	}
	return kv
}

// reconcile recomputes the endpoint set from the cache.
func (s *Source) reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	sel, ports, ok, err := s.poolSpec(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ok {
		return reconcile.Result{}, nil
	}
	var pods corev1.PodList
	if err := s.reader.List(ctx, &pods, client.InNamespace(s.opts.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return reconcile.Result{}, fmt.Errorf("list pods: %w", err)
	}
	specs, skipped, ignored := endpoints(pods.Items, ports, s.opts.MetricsPort, s.annotations)
	for _, msg := range skipped {
		s.log.V(1).Info("Pod skipped", "reason", msg)
	}
	s.logIgnored(ignored)
	if err := s.store.Replace(specs); err != nil {
		// Endpoints validates every spec, so this is a bug; keep the last
		// good set and say why.
		s.log.Error(err, "Endpoint set refused; the last good set stays")
		return reconcile.Result{}, err
	}
	if !s.store.Snapshot().Synced {
		s.log.Info("Pool synced", "endpoints", len(specs), "pods", len(pods.Items))
	}
	s.store.SetSynced(true)
	s.log.V(1).Info("Endpoints updated", "endpoints", len(specs))
	return reconcile.Result{}, nil
}

// logIgnored logs each invalid annotation value once while it stays: a
// value logged before is not logged again, a new value (or the same
// value after it was fixed and broken again) is.
func (s *Source) logIgnored(problems []AnnotationProblem) {
	now := make(map[string]uint64, len(problems))
	for _, p := range problems {
		k := p.Pod + "\x00" + p.Annotation
		now[k] = p.hash
		if h, ok := s.logged[k]; !ok || h != p.hash {
			s.log.Info("Invalid pod annotation ignored; the pod serves without it", "pod", p.Pod, "annotation", p.Annotation, "problem", p.Problem)
		}
	}
	s.logged = now
}

// poolSpec returns the selector and target ports to use; ok is false when
// the pool does not exist (its endpoints are then dropped).
func (s *Source) poolSpec(ctx context.Context) (labels.Selector, []int, bool, error) {
	if s.opts.PoolName == "" {
		return s.opts.Selector, s.opts.TargetPorts, true, nil
	}
	var pool infv1.InferencePool
	err := s.reader.Get(ctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: s.opts.PoolName}, &pool)
	switch {
	case apierrors.IsNotFound(err) || err == nil && pool.DeletionTimestamp != nil:
		return nil, nil, false, s.noPool()
	case err != nil:
		return nil, nil, false, fmt.Errorf("get InferencePool: %w", err)
	}
	s.waitLogged = false
	set := make(labels.Set, len(pool.Spec.Selector.MatchLabels))
	for k, v := range pool.Spec.Selector.MatchLabels {
		set[string(k)] = string(v)
	}
	ports := make([]int, len(pool.Spec.TargetPorts))
	for i, p := range pool.Spec.TargetPorts {
		ports[i] = int(p.Number)
	}
	// An empty selector would select every pod; the CRD requires one, so
	// an empty one here means no pods.
	if len(set) == 0 {
		return labels.Nothing(), ports, true, nil
	}
	return labels.SelectorFromSet(set), ports, true, nil
}

// noPool empties the endpoint set and withdraws readiness while the pool
// does not exist (or is being deleted), as GIE does.
func (s *Source) noPool() error {
	snap := s.store.Snapshot()
	switch {
	case snap.Synced || len(snap.All()) > 0:
		s.log.Info("InferencePool gone: no endpoints and not ready until it is back", "inferencePool", s.opts.Namespace+"/"+s.opts.PoolName)
	case !s.waitLogged:
		s.log.Info("Waiting for the InferencePool", "inferencePool", s.opts.Namespace+"/"+s.opts.PoolName)
	}
	s.waitLogged = true
	if err := s.store.Replace(nil); err != nil {
		return err
	}
	s.store.SetSynced(false)
	return nil
}

// TrimPod is the pod cache's transform: it keeps what the endpoint set is
// made of (name, namespace, labels, the active-ports annotation and the
// switchyard.ai annotations, deletion, IP, Ready condition) and drops the
// rest (spec, managed fields, other annotations), so a namespace with many
// pods costs little memory. Objects that are not pods pass unchanged.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Labels:            pod.Labels,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, PodIP: pod.Status.PodIP},
	}
	for _, k := range annotations {
		if v, ok := pod.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = make(map[string]string, len(annotations))
			}
			out.Annotations[k] = v
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out, nil
}

// Endpoints turns pods into endpoint specs: the Ready, non-terminating
// pods with an IP, one endpoint per target port named "<pod>-rank-<i>",
// sorted by name, with the weight, models and internal flag of the pod's
// switchyard.ai annotations (ReadAnnotations; invalid values are ignored).
// skipped says which pods were left out and why (beyond not being ready),
// e.g. an address already used by another pod.
func Endpoints(pods []corev1.Pod, ports []int, metricsPort int) (specs []datastore.EndpointSpec, skipped []string) {
	r := newAnnotationReader()
	specs, skipped, _ = endpoints(pods, ports, metricsPort, r)
	return specs, skipped
}

// endpoints is Endpoints with a reader that remembers parsed annotation
// values between passes, returning the ignored annotation values too.
func endpoints(pods []corev1.Pod, ports []int, metricsPort int, r *annotationReader) (specs []datastore.EndpointSpec, skipped []string, ignored []AnnotationProblem) {
	r.pass()
	sorted := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		if Serving(&pods[i]) {
			sorted = append(sorted, &pods[i])
		}
	}
	slices.SortFunc(sorted, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	used := make(map[string]string, len(sorted)*len(ports))
	mp := 0
	if len(ports) == 1 {
		mp = metricsPort
	}
	for _, pod := range sorted {
		podSpecs := make([]datastore.EndpointSpec, 0, len(ports))
		bad := ""
		active := activePorts(pod)
		data, problems := r.read(pod)
		for i, port := range ports {
			if active != nil && !active[port] {
				continue // the rank keeps its index: names do not shift
			}
			sp := datastore.EndpointSpec{
				Name:        fmt.Sprintf("%s-rank-%d", pod.Name, i),
				Namespace:   pod.Namespace,
				PodName:     pod.Name,
				Address:     pod.Status.PodIP,
				Port:        port,
				Labels:      pod.Labels,
				MetricsPort: mp,
				Weight:      data.Weight,
				Models:      data.Models,
				Internal:    data.Internal,
				NoScrape:    data.NoScrape,
				ProviderTPM: data.ProviderTPM,
				ProviderRPM: data.ProviderRPM,
			}
			if err := sp.Validate(); err != nil {
				bad = fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
				break
			}
			if other, ok := used[sp.HostPort()]; ok {
				bad = fmt.Sprintf("pod %s/%s: %s is already the address of pod %s", pod.Namespace, pod.Name, sp.HostPort(), other)
				break
			}
			podSpecs = append(podSpecs, sp)
		}
		if bad != "" {
			skipped = append(skipped, bad)
			continue
		}
		ignored = append(ignored, problems...)
		for _, sp := range podSpecs {
			used[sp.HostPort()] = pod.Name
		}
		specs = append(specs, podSpecs...)
	}
	return specs, skipped, ignored
}

// activePorts reads ActivePortsAnnotation; nil means every port. Entries
// that are not numbers are ignored, as in GIE.
func activePorts(pod *corev1.Pod) map[int]bool {
	v, ok := pod.Annotations[ActivePortsAnnotation]
	if !ok {
		return nil
	}
	out := map[int]bool{}
	for part := range strings.SplitSeq(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(part)); err == nil && n > 0 {
			out[n] = true
		}
	}
	return out
}

// Serving reports whether a pod takes requests: it has an IP, is not
// terminating, and its Ready condition is true.
func Serving(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
