package main

import (
	"flag"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/switchyard-ai/switchyard/pkg/objectives"
	"github.com/switchyard-ai/switchyard/pkg/server"
)

// objectiveFlags choose where request priorities (InferenceObjective
// names in x-gateway-inference-objective) come from.
type objectiveFlags struct {
	file  string
	watch bool
}

func (o *objectiveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.file, "objectives-file", "", "YAML file of InferenceObjective priorities (objectives: [{name, priority}]), watched for changes; the x-gateway-inference-objective header names one. Standalone mode, or Kubernetes mode instead of the InferenceObjective watch")
	fs.BoolVar(&o.watch, "watch-inference-objectives", true, "Kubernetes mode with --pool-name: read request priorities from the InferenceObjectives (inference.networking.x-k8s.io/v1alpha2) of the pool's namespace that reference the pool (needs list and watch on inferenceobjectives)")
}

// errors returns the flag errors: the watch needs Kubernetes mode with
// --pool-name, and the file replaces it.
func (o *objectiveFlags) errors(set map[string]bool, poolMode bool) []string {
	var errs []string
	if set["watch-inference-objectives"] && o.watch && !poolMode {
		errs = append(errs, "--watch-inference-objectives needs Kubernetes mode with --pool-name (objectives reference their pool)")
	}
	if set["watch-inference-objectives"] && o.watch && o.file != "" {
		errs = append(errs, "--objectives-file and --watch-inference-objectives are mutually exclusive (the file replaces the watch)")
	}
	return errs
}

// apply sets the server's objective source.
func (o *objectiveFlags) apply(cfg *server.Config, k *kubeImports, group string, logger logr.Logger) {
	if o.file != "" {
		cfg.ObjectivesFile = o.file
		return
	}
	if !o.watch || k == nil || k.pool == "" {
		return
	}
	config, ns, pool := k.config, k.namespace, k.pool
	cfg.Objectives = func(set *objectives.Set) (server.Runner, error) {
		return newObjectiveWatch(config, ns, pool, group, set, logger)
	}
}

func newObjectiveWatch(config *rest.Config, ns, pool, group string, set *objectives.Set, logger logr.Logger) (server.Runner, error) {
	return objectives.NewKubeSource(objectives.KubeOptions{
		Config: config, Namespace: ns, PoolName: pool, PoolGroup: group, Set: set,
		Logger: logger.WithName("inferenceobjective"),
	})
}
