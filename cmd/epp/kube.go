package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/kubesource"
	"github.com/switchyard-ai/switchyard/pkg/server"
	"github.com/switchyard-ai/switchyard/pkg/server/metricsauth"
)

// kubeFlags are the Kubernetes-mode flags beyond GIE's pool flags.
type kubeFlags struct {
	kubeconfig                                string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	leaderElectionID                          string
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (Kubernetes mode); default $KUBECONFIG, then the in-cluster service account, then ~/.kube/config")
	fs.DurationVar(&k.leaseDuration, "ha-lease-duration", kubesource.DefaultLeaseDuration, "leader election: how long a standby waits before taking over a lease that was not renewed")
	fs.DurationVar(&k.renewDeadline, "ha-renew-deadline", kubesource.DefaultRenewDeadline, "leader election: how long the leader keeps retrying a renewal before it steps down")
	fs.DurationVar(&k.retryPeriod, "ha-retry-period", kubesource.DefaultRetryPeriod, "leader election: interval between attempts to acquire or renew the lease")
	fs.StringVar(&k.leaderElectionID, "ha-lease-name", "", "leader election: the Lease name (default GIE's: epp-<namespace>-<pool>.gateway-api-inference-extension.sigs.k8s.io)")
}

// kubeOnly are the flags that mean nothing without Kubernetes mode.
var kubeOnly = []string{"kubeconfig", "ha-lease-duration", "ha-renew-deadline", "ha-retry-period", "ha-lease-name"}

// standaloneErrors refuses Kubernetes-only flags in standalone mode.
func (k *kubeFlags) standaloneErrors(set map[string]bool) []string {
	var errs []string
	for _, name := range kubeOnly {
		if set[name] {
			errs = append(errs, fmt.Sprintf("--%s needs Kubernetes mode (--pool-name or --endpoint-selector without --endpoints-file)", name))
		}
	}
	return errs
}

// portList is --endpoint-target-ports: "8000,8001", or the flag repeated
// (GIE's pflag IntSlice accepts both); a port given twice counts once, as
// in GIE.
type portList []int

func (p *portList) String() string {
	parts := make([]string, len(*p))
	for i, v := range *p {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (p *portList) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil {
			return fmt.Errorf("%q is not a port number", part)
		}
		if !slices.Contains(*p, n) {
			*p = append(*p, n)
		}
	}
	return nil
}

// kubeParts is what Kubernetes mode adds to the server configuration.
type kubeParts struct {
	source    func(*datastore.Store) (server.EndpointSource, error)
	namespace string
	// metricsFilter authenticates and authorizes the metrics port
	// (--metrics-endpoint-auth); nil when it is off.
	metricsFilter func(http.Handler) http.Handler
	// config reaches the API server (for the InferencePoolImport watch).
	config *rest.Config
}

// kubeSource checks the Kubernetes-mode flags and returns what the server
// needs: the endpoint source factory, the pool's namespace and the metrics
// port's filter.
func (f *serveFlags) kubeSource(logger logr.Logger) (kubeParts, error) {
	ns := f.poolNamespace
	if ns == "" {
		ns = os.Getenv("NAMESPACE")
	}
	if ns == "" {
		ns = "default"
	}
	opts := kubesource.Options{
		Namespace:        ns,
		PoolName:         f.poolName,
		PoolGroup:        f.poolGrp,
		TargetPorts:      f.endpointTargetPorts,
		MetricsPort:      f.msMetricsPort,
		LeaderElection:   f.leaderElection,
		LeaderElectionID: f.kube.leaderElectionID,
		LeaseDuration:    f.kube.leaseDuration,
		RenewDeadline:    f.kube.renewDeadline,
		RetryPeriod:      f.kube.retryPeriod,
		Logger:           logger.WithName("kubernetes"),
	}
	if f.endpointSelector != "" {
		sel, err := labels.Parse(f.endpointSelector)
		if err != nil {
			return kubeParts{}, fmt.Errorf("--endpoint-selector: %w", err)
		}
		opts.Selector = sel
	}
	// The client configuration is checked before anything listens, so a
	// missing kubeconfig is a start-up error, not a crash loop later.
	cfg, err := restConfig(f.kube.kubeconfig)
	if err != nil {
		return kubeParts{}, err
	}
	opts.Config = cfg
	if err := opts.Validate(); err != nil {
		return kubeParts{}, err
	}
	// controller-runtime and client-go log through the global loggers.
	ctrllog.SetLogger(logger.WithName("kubernetes"))
	klog.SetLogger(logger.WithName("client-go"))
	km := kubeParts{namespace: ns, config: cfg, source: func(store *datastore.Store) (server.EndpointSource, error) {
		return kubesource.New(store, opts)
	}}
	if f.metricsAuth {
		// GIE's --metrics-endpoint-auth: a bearer token checked with a
		// TokenReview, then a SubjectAccessReview for the path (GET
		// /metrics needs a ClusterRole with nonResourceURLs ["/metrics"]).
		if km.metricsFilter, err = metricsauth.Filter(cfg, logger.WithName("metrics-auth")); err != nil {
			return kubeParts{}, fmt.Errorf("--metrics-endpoint-auth: %w", err)
		}
	}
	return km, nil
}

// restConfig loads the API server client configuration: --kubeconfig,
// else $KUBECONFIG, the in-cluster service account or ~/.kube/config.
func restConfig(path string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
		}
	} else if cfg, err = ctrlconfig.GetConfig(); err != nil {
		return nil, fmt.Errorf("Kubernetes mode needs an API server: give --kubeconfig, set $KUBECONFIG, or run in a pod with a service account: %w", err)
	}
	cfg.UserAgent = "switchyard-epp"
	// One rate limit whichever way the configuration was found (clientcmd
	// keeps client-go's 5/s, controller-runtime's loader lifts it): a pool
	// watch makes few requests; the lease renewals must not queue.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// selectorPoolName names the pool in metrics in --endpoint-selector mode:
// the EPP's Deployment (from POD_NAME), as GIE does.
func selectorPoolName() string {
	if name, ok := kubesource.DeploymentName(os.Getenv("POD_NAME")); ok {
		return name
	}
	return "switchyard"
}
