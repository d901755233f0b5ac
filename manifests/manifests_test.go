package manifests_test

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

const (
	gieModule    = "sigs.k8s.io/gateway-api-inference-extension"
	inferenceGrp = "inference.networking.k8s.io"
	gatewayGrp   = "gateway.networking.k8s.io"
	istioGrp     = "networking.istio.io"
	eppName      = "switchyard"
	eppContainer = "epp"
)

// objectiveCRD is the InferenceObjective CRD, which GIE ships up to
// v1.5.0 (v1.6 dropped the v1alpha2 API; the EPP still reads its users'
// objectives), and objectiveCRDVersion the GIE version it is copied from.
const (
	objectiveCRD        = "inference.networking.x-k8s.io_inferenceobjectives.yaml"
	objectiveCRDVersion = "v1.5.0"
)

// TestCRDCopiesMatchModule: the CRDs shipped in base/crds are exactly the
// files of config/crd/bases of the GIE module at the version go.mod
// requires, plus the InferenceObjective CRD of GIE v1.5.0, byte for byte,
// no more and no fewer (hack/sync-manifests.sh refreshes them).
func TestCRDCopiesMatchModule(t *testing.T) {
	version := goModVersion(t, gieModule)
	src := filepath.Join(moduleDir(t, gieModule, version), "config", "crd", "bases")
	want := yamlFiles(t, src)
	if len(want) == 0 {
		t.Fatalf("no CRD files in %s", src)
	}
	origin := map[string]string{}
	for name := range want {
		origin[name] = version
	}
	if _, ok := want[objectiveCRD]; !ok {
		old := filepath.Join(moduleDir(t, gieModule, objectiveCRDVersion), "config", "crd", "bases", objectiveCRD)
		want[objectiveCRD] = readFile(t, old)
		origin[objectiveCRD] = objectiveCRDVersion
	}
	got := yamlFiles(t, filepath.Join(baseDir, "crds"))
	for name, data := range want {
		have, ok := got[name]
		switch {
		case !ok:
			t.Errorf("base/crds/%s is missing (run hack/sync-manifests.sh)", name)
		case !bytes.Equal(have, data):
			t.Errorf("base/crds/%s differs from %s@%s config/crd/bases/%s (run hack/sync-manifests.sh)", name, gieModule, origin[name], name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("base/crds/%s is not a file of %s@%s config/crd/bases", name, gieModule, version)
		}
	}
	// Every copy is listed in the CRD kustomization.
	k := readFile(t, filepath.Join(baseDir, "crds", "kustomization.yaml"))
	for name := range want {
		if !bytes.Contains(k, []byte("- "+name+"\n")) {
			t.Errorf("base/crds/kustomization.yaml does not list %s", name)
		}
	}
}

// yamlFiles reads the *.yaml files of dir except kustomization.yaml.
func yamlFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".yaml" || e.Name() == "kustomization.yaml" {
			continue
		}
		out[e.Name()] = readFile(t, filepath.Join(dir, e.Name()))
	}
	return out
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// repoDefaultConfig is the repository's config/default.yaml.
func repoDefaultConfig(t testing.TB) []byte {
	return readFile(t, filepath.Join("..", "config", "default.yaml"))
}

// TestConfigCopyMatchesRepo: kustomize cannot read ../config, so the base
// keeps a copy of config/default.yaml; it must not drift.
func TestConfigCopyMatchesRepo(t *testing.T) {
	if got, want := readFile(t, filepath.Join(baseDir, "config", "default.yaml")), repoDefaultConfig(t); !bytes.Equal(got, want) {
		t.Fatal("base/config/default.yaml differs from config/default.yaml (run hack/sync-manifests.sh)")
	}
}

// expectation says what one kustomization must render.
type expectation struct {
	pool           string // InferencePool name (and --pool-name)
	namespace      string // namespace set by the kustomization ("" = none)
	replicas       int64
	leaderElection bool
	gatewayClass   string // "" = no Gateway
	destRule       bool   // Istio DestinationRule for the EPP
	verifiedTLS    bool   // --cert-path and a verifying DestinationRule
	envoy          bool   // standalone Envoy
	crdsOnly       bool   // the CRDs alone
	config         string // the EndpointPickerConfig file mounted ("" = config/default.yaml)
	multisite      bool   // the site-relay and the EPP's signals source
	monitoring     bool   // ServiceMonitors, PrometheusRule, dashboard ConfigMaps
}

var expectations = map[string]expectation{
	baseDir + "/crds":          {crdsOnly: true},
	baseDir:                    {pool: "vllm-llama3-8b-instruct", replicas: 1},
	istioDir:                   {pool: "vllm-llama3-8b-instruct", replicas: 1, gatewayClass: "istio", destRule: true},
	kgatewayDir:                {pool: "vllm-llama3-8b-instruct", replicas: 1, gatewayClass: "kgateway"},
	envoyDir:                   {pool: "vllm-llama3-8b-instruct", replicas: 1, envoy: true},
	multiDir:                   {pool: "vllm-llama3-8b-instruct", replicas: 1, multisite: true},
	monitorDir:                 {pool: "vllm-llama3-8b-instruct", replicas: 1, multisite: true, monitoring: true},
	"examples/custom-config":   {pool: "vllm-llama3-8b-instruct", replicas: 1, config: "examples/custom-config/default.yaml"},
	"examples/custom-pool":     {pool: "qwen3-32b", namespace: "llm", replicas: 1, gatewayClass: "istio", destRule: true},
	"examples/leader-election": {pool: "vllm-llama3-8b-instruct", replicas: 2, leaderElection: true},
	"examples/tls":             {pool: "vllm-llama3-8b-instruct", namespace: "llm", replicas: 1, gatewayClass: "istio", destRule: true, verifiedTLS: true},
}

// TestRenderedManifests renders every kustomization and checks that the
// objects fit together: the Deployment's flags name the InferencePool and
// the mounted configuration, the pool points at the EPP Service, RBAC is
// least privilege, routes reach the pool.
func TestRenderedManifests(t *testing.T) {
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			want, ok := expectations[dir]
			if !ok {
				t.Fatalf("kustomization %s has no entry in expectations", dir)
			}
			objs := objects(render(t, dir))
			checkNamespaces(t, objs, want.namespace)
			if want.crdsOnly {
				if n := len(objs.ofKind("apiextensions.k8s.io", "CustomResourceDefinition")); n != len(objs) {
					t.Errorf("%s renders %d objects besides the CRDs", dir, len(objs)-n)
				}
				return
			}
			// "Removing it" in the README deletes by this label.
			for _, u := range objs {
				if u.GetKind() != "CustomResourceDefinition" && u.GetLabels()["app.kubernetes.io/part-of"] != "switchyard" {
					t.Errorf("%s lacks the label app.kubernetes.io/part-of=switchyard", describe(u))
				}
			}
			checkEPP(t, objs, want)
			checkRBAC(t, objs, want)
			checkMultisite(t, objs, want)
			checkRoutes(t, objs, want)
			checkDestinationRule(t, objs, want)
			checkEnvoy(t, objs, want)
			checkMonitoring(t, objs, want)
		})
	}
}

// clusterScoped are the built-in and Gateway API kinds without a namespace
// that a kustomization here might be tempted to ship.
var clusterScoped = []string{"ClusterRole", "ClusterRoleBinding", "Namespace", "GatewayClass", "PriorityClass",
	"StorageClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
	"ValidatingAdmissionPolicyBinding", "APIService", "PersistentVolume"}

func checkNamespaces(t *testing.T, objs objects, want string) {
	for _, u := range objs {
		kind := u.GetKind()
		if slices.Contains(clusterScoped, kind) {
			t.Errorf("%s: cluster-scoped objects other than CRDs are not shipped", describe(u))
		}
		if kind == "CustomResourceDefinition" {
			if u.GetNamespace() != "" {
				t.Errorf("%s has namespace %q", describe(u), u.GetNamespace())
			}
			continue
		}
		if got := u.GetNamespace(); got != want {
			t.Errorf("%s: namespace %q, want %q", describe(u), got, want)
		}
	}
	crds := objs.ofKind("apiextensions.k8s.io", "CustomResourceDefinition")
	names := make([]string, len(crds))
	for i, u := range crds {
		names[i] = u.GetName()
	}
	slices.Sort(names)
	if want := []string{"inferenceobjectives.inference.networking.x-k8s.io", "inferencepoolimports.inference.networking.x-k8s.io", "inferencepools.inference.networking.k8s.io"}; !slices.Equal(names, want) {
		t.Errorf("CRDs %v, want %v", names, want)
	}
}

// parseArgs reads a container's args into flag -> value. A flag followed
// by another flag (or nothing) is a boolean set to "true".
func parseArgs(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			out["<positional>"] += a + " "
			continue
		}
		name := "--" + strings.TrimLeft(a, "-")
		if k, v, ok := strings.Cut(name, "="); ok {
			out[k] = v
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out[name] = args[i+1]
			i++
			continue
		}
		out[name] = "true"
	}
	return out
}

func container(t testing.TB, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func checkEPP(t *testing.T, objs objects, want expectation) {
	du := objs.get("apps", "Deployment", eppName)
	if du == nil {
		t.Fatalf("no Deployment %s", eppName)
	}
	dep := typed[appsv1.Deployment](t, du)
	if dep.Spec.Replicas == nil || int64(*dep.Spec.Replicas) != want.replicas {
		t.Errorf("Deployment replicas %v, want %d", dep.Spec.Replicas, want.replicas)
	}
	if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("Deployment strategy %q, want Recreate", dep.Spec.Strategy.Type)
	}
	pod := &dep.Spec.Template.Spec
	c := container(t, pod, eppContainer)
	flags := parseArgs(c.Args)
	if p := flags["<positional>"]; p != "" {
		t.Errorf("epp args hold stray values %q (args %q)", p, c.Args)
	}
	for flag, value := range map[string]string{
		"--pool-name":      want.pool,
		"--pool-namespace": "$(NAMESPACE)",
		"--pool-group":     inferenceGrp,
		"--zap-encoder":    "json",
		"--v":              "1",
		"--tracing":        "false", // as GIE's chart
	} {
		if got := flags[flag]; got != value {
			t.Errorf("epp %s = %q, want %q (args %q)", flag, got, value, c.Args)
		}
	}
	if got := flags["--ha-enable-leader-election"] == "true"; got != want.leaderElection {
		t.Errorf("--ha-enable-leader-election %v, want %v", got, want.leaderElection)
	}
	if dep.Spec.Replicas != nil && *dep.Spec.Replicas > 1 && !want.leaderElection {
		t.Errorf("%d replicas without --ha-enable-leader-election", *dep.Spec.Replicas)
	}

	// The pool the flags name exists and points at the EPP Service.
	pu := objs.get(inferenceGrp, "InferencePool", want.pool)
	if pu == nil {
		t.Fatalf("--pool-name %q names no InferencePool in the output", want.pool)
	}
	if n := len(objs.ofKind(inferenceGrp, "InferencePool")); n != 1 {
		t.Errorf("%d InferencePools, want 1", n)
	}
	pool := typed[infv1.InferencePool](t, pu)
	ref := pool.Spec.EndpointPickerRef
	if ref == nil || ref.Port == nil {
		t.Fatalf("InferencePool %s has no endpointPickerRef with a port", pool.Name)
	}
	if ref.FailureMode != infv1.EndpointPickerFailClose {
		t.Errorf("endpointPickerRef.failureMode %q, want FailClose", ref.FailureMode)
	}
	if len(pool.Spec.TargetPorts) != 1 || pool.Spec.TargetPorts[0].Number != 8000 {
		t.Errorf("InferencePool targetPorts %v, want [8000]", pool.Spec.TargetPorts)
	}
	su := objs.get("", "Service", string(ref.Name))
	if su == nil {
		t.Fatalf("endpointPickerRef names Service %q, which is not in the output", ref.Name)
	}
	svc := typed[corev1.Service](t, su)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s selector %v does not select the EPP pods %v", svc.Name, svc.Spec.Selector, dep.Spec.Template.Labels)
	}
	poolSel := map[string]string{}
	for k, v := range pool.Spec.Selector.MatchLabels {
		poolSel[string(k)] = string(v)
	}
	if labels.SelectorFromSet(poolSel).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("the InferencePool selector %v selects the EPP's own pods", poolSel)
	}
	containerPorts := map[string]int32{}
	for _, p := range c.Ports {
		containerPorts[p.Name] = p.ContainerPort
	}
	for name, port := range map[string]int32{"grpc": 9002, "grpc-health": 9003, "metrics": 9090} {
		if containerPorts[name] != port {
			t.Errorf("container port %s = %d, want %d", name, containerPorts[name], port)
		}
	}
	svcPorts := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p
	}
	ext, ok := svcPorts["grpc-ext-proc"]
	switch {
	case !ok || ext.Port != int32(ref.Port.Number):
		t.Errorf("Service %s has no port grpc-ext-proc = %d (the pool's endpointPickerRef port): %v", svc.Name, ref.Port.Number, svc.Spec.Ports)
	case containerPorts[ext.TargetPort.String()] != 9002 && ext.TargetPort.IntVal != 9002:
		t.Errorf("Service port grpc-ext-proc targets %s, not the ext_proc container port 9002", ext.TargetPort.String())
	case ext.AppProtocol == nil || *ext.AppProtocol != "http2":
		t.Errorf("Service port grpc-ext-proc appProtocol %v, want http2", ext.AppProtocol)
	}
	if m, ok := svcPorts["http-metrics"]; !ok || m.Port != 9090 {
		t.Errorf("Service %s has no port http-metrics = 9090", svc.Name)
	}

	// Environment from the downward API.
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["NAMESPACE"] != "metadata.namespace" || env["POD_NAME"] != "metadata.name" {
		t.Errorf("env NAMESPACE/POD_NAME from the downward API: got %v", env)
	}

	// Probes: gRPC health on 9003.
	for _, p := range []struct {
		probe   *corev1.Probe
		service string
	}{{c.LivenessProbe, "liveness"}, {c.ReadinessProbe, "readiness"}} {
		if p.probe == nil || p.probe.GRPC == nil || p.probe.GRPC.Port != 9003 || p.probe.GRPC.Service == nil || *p.probe.GRPC.Service != p.service {
			t.Errorf("want a gRPC probe on port 9003 for service %q, got %+v", p.service, p.probe)
		}
	}

	// The configuration file is in the mounted, generated ConfigMap and is
	// config/default.yaml.
	cfgFile := flags["--config-file"]
	cm, rel := mountedConfigMap(t, objs, pod, c, cfgFile)
	wantCfg, wantName := repoDefaultConfig(t), "config/default.yaml"
	if want.config != "" {
		wantCfg, wantName = readFile(t, want.config), want.config
	}
	if got := cm.Data[rel]; got != string(wantCfg) {
		t.Errorf("ConfigMap %s key %q is not %s:\n%s", cm.Name, rel, wantName, got)
	}
	// The EPP's own loader accepts it.
	if _, err := config.Load([]byte(cm.Data[rel]), config.Options{Registry: plugins.InTree()}); err != nil {
		t.Errorf("ConfigMap %s key %q: %v", cm.Name, rel, err)
	}
	if !strings.HasPrefix(cm.Name, "switchyard-config-") {
		t.Errorf("ConfigMap name %q carries no kustomize content hash", cm.Name)
	}

	// Hardening.
	if pod.ServiceAccountName != eppName {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, eppName)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v: must exceed the EPP's 30s --shutdown-grace", g)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	checkContainerHardening(t, c)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("epp resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if c.Image == "" {
		t.Error("epp has no image")
	}

	// --cert-path: from a Secret volume.
	cp, hasCert := flags["--cert-path"]
	if hasCert != want.verifiedTLS {
		t.Errorf("--cert-path set %v, want %v", hasCert, want.verifiedTLS)
	}
	if hasCert {
		found := false
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil && path.Clean(m.MountPath) == path.Clean(cp) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("--cert-path %q is not a mounted Secret", cp)
		}
	}
}

func checkContainerHardening(t *testing.T, c *corev1.Container) {
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container %s securityContext %+v: want no privilege escalation, read-only root, drop ALL", c.Name, sc)
	}
}

// mountedConfigMap finds the ConfigMap volume of c whose mount holds
// file; rel is file's path inside it. Mounts must be read-only.
func mountedConfigMap(t *testing.T, objs objects, pod *corev1.PodSpec, c *corev1.Container, file string) (cm *corev1.ConfigMap, rel string) {
	t.Helper()
	var cmName string
	for _, m := range c.VolumeMounts {
		r, err := filepath.Rel(m.MountPath, file)
		if err != nil || strings.HasPrefix(r, "..") {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("volume mount %s is writable", m.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cmName, rel = v.ConfigMap.Name, r
			}
		}
	}
	if cmName == "" {
		t.Fatalf("container %s: %q is not under a ConfigMap volume mount", c.Name, file)
	}
	cmu := objs.get("", "ConfigMap", cmName)
	if cmu == nil {
		t.Fatalf("container %s: the volume names ConfigMap %q, which is not in the output", c.Name, cmName)
	}
	return typed[corev1.ConfigMap](t, cmu), rel
}

// wantRules is all the EPP may do, as group/resource:verb.
var wantRules = []string{
	"/pods:get", "/pods:list", "/pods:watch",
	"inference.networking.k8s.io/inferencepools:get", "inference.networking.k8s.io/inferencepools:list", "inference.networking.k8s.io/inferencepools:watch",
	"inference.networking.x-k8s.io/inferenceobjectives:list", "inference.networking.x-k8s.io/inferenceobjectives:watch",
	"coordination.k8s.io/leases:get", "coordination.k8s.io/leases:create", "coordination.k8s.io/leases:update",
}

// multisiteRules are what the multisite overlay adds to wantRules: the
// InferencePoolImport named like the pool (--site-topology-imports).
var multisiteRules = []string{
	"inference.networking.x-k8s.io/inferencepoolimports:get", "inference.networking.x-k8s.io/inferencepoolimports:list", "inference.networking.x-k8s.io/inferencepoolimports:watch",
}

func checkRBAC(t *testing.T, objs objects, exp expectation) {
	role := typed[rbacv1.Role](t, objs.one(t, "rbac.authorization.k8s.io", "Role"))
	var got []string
	for _, r := range role.Rules {
		if len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("Role %s rule %+v: resourceNames/nonResourceURLs are not expected", role.Name, r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" || strings.Contains(res, "/") {
						t.Errorf("Role %s: wildcard or subresource in %+v", role.Name, r)
					}
					got = append(got, g+"/"+res+":"+v)
				}
			}
		}
	}
	slices.Sort(got)
	want := slices.Clone(wantRules)
	if exp.multisite {
		want = append(want, multisiteRules...)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Role %s grants\n  %v\nwant exactly\n  %v", role.Name, got, want)
	}
	rb := typed[rbacv1.RoleBinding](t, objs.one(t, "rbac.authorization.k8s.io", "RoleBinding"))
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || rb.RoleRef.APIGroup != "rbac.authorization.k8s.io" {
		t.Errorf("RoleBinding %s roleRef %+v, want Role %s", rb.Name, rb.RoleRef, role.Name)
	}
	sa := objs.one(t, "", "ServiceAccount")
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.GetName() ||
		(rb.Subjects[0].Namespace != "" && rb.Subjects[0].Namespace != rb.Namespace) {
		t.Errorf("RoleBinding %s subjects %+v, want only ServiceAccount %s of its namespace", rb.Name, rb.Subjects, sa.GetName())
	}
}

func checkRoutes(t *testing.T, objs objects, want expectation) {
	gws := objs.ofKind(gatewayGrp, "Gateway")
	routes := objs.ofKind(gatewayGrp, "HTTPRoute")
	if want.gatewayClass == "" {
		if len(gws)+len(routes) != 0 {
			t.Errorf("%d Gateways and %d HTTPRoutes, want none", len(gws), len(routes))
		}
		return
	}
	if len(gws) != 1 || len(routes) != 1 {
		t.Fatalf("%d Gateways and %d HTTPRoutes, want one each", len(gws), len(routes))
	}
	if class, _, _ := unstructured.NestedString(gws[0].Object, "spec", "gatewayClassName"); class != want.gatewayClass {
		t.Errorf("Gateway %s gatewayClassName %q, want %q", gws[0].GetName(), class, want.gatewayClass)
	}
	rules, _, _ := unstructured.NestedSlice(routes[0].Object, "spec", "rules")
	parents, _, _ := unstructured.NestedSlice(routes[0].Object, "spec", "parentRefs")
	if len(parents) != 1 || parents[0].(map[string]any)["name"] != gws[0].GetName() {
		t.Errorf("HTTPRoute %s parentRefs %v, want the Gateway %s", routes[0].GetName(), parents, gws[0].GetName())
	}
	n := 0
	for _, r := range rules {
		refs, _, _ := unstructured.NestedSlice(r.(map[string]any), "backendRefs")
		for _, ref := range refs {
			m := ref.(map[string]any)
			n++
			if m["group"] != inferenceGrp || m["kind"] != "InferencePool" || m["name"] != want.pool {
				t.Errorf("HTTPRoute %s backendRef %v, want InferencePool %s", routes[0].GetName(), m, want.pool)
			}
		}
	}
	if n == 0 {
		t.Errorf("HTTPRoute %s has no backendRefs", routes[0].GetName())
	}
}

func checkDestinationRule(t *testing.T, objs objects, want expectation) {
	drs := objs.ofKind(istioGrp, "DestinationRule")
	if !want.destRule {
		if len(drs) != 0 {
			t.Errorf("%d DestinationRules, want none", len(drs))
		}
		return
	}
	if len(drs) != 1 {
		t.Fatalf("%d DestinationRules, want 1", len(drs))
	}
	dr := drs[0]
	host, _, _ := unstructured.NestedString(dr.Object, "spec", "host")
	if host != eppName && (want.namespace == "" || host != eppName+"."+want.namespace+".svc.cluster.local") {
		t.Errorf("DestinationRule host %q does not name the EPP Service %s", host, eppName)
	}
	tls, _, _ := unstructured.NestedMap(dr.Object, "spec", "trafficPolicy", "tls")
	if tls["mode"] != "SIMPLE" {
		t.Errorf("DestinationRule tls %v: want mode SIMPLE", tls)
	}
	skip, _ := tls["insecureSkipVerify"].(bool)
	if want.verifiedTLS {
		if skip || tls["credentialName"] == nil || tls["sni"] == nil {
			t.Errorf("DestinationRule tls %v: want verification with a credentialName and sni", tls)
		}
	} else if !skip {
		t.Errorf("DestinationRule tls %v: the EPP's certificate is self-signed, want insecureSkipVerify", tls)
	}
}

func checkEnvoy(t *testing.T, objs objects, want expectation) {
	du := objs.get("apps", "Deployment", "switchyard-envoy")
	if !want.envoy {
		if du != nil {
			t.Error("an Envoy Deployment outside the envoy overlay")
		}
		return
	}
	if du == nil {
		t.Fatal("no Deployment switchyard-envoy")
	}
	dep := typed[appsv1.Deployment](t, du)
	pod := &dep.Spec.Template.Spec
	c := container(t, pod, "envoy")
	checkContainerHardening(t, c)
	flags := parseArgs(c.Args)
	cfg := flags["--config-path"]
	cm, rel := mountedConfigMap(t, objs, pod, c, cfg)
	if rel != "envoy.yaml" {
		t.Fatalf("Envoy --config-path %q is not envoy.yaml of a mounted ConfigMap (%q)", cfg, rel)
	}
	if cm.Data["envoy.yaml"] != string(readFile(t, filepath.Join(envoyDir, "envoy.yaml"))) {
		t.Error("the rendered Envoy ConfigMap's envoy.yaml differs from overlays/envoy/envoy.yaml")
	}
	// The ports the bootstrap listens on are the ones the pod and the
	// Service use; the EPP cluster is the EPP Service.
	b := loadBootstrap(t, []byte(cm.Data["envoy.yaml"]))
	facts := bootstrapFacts(t, b)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != int32(facts.listenPort) {
		t.Errorf("Envoy container port http = %d, the bootstrap listens on %d", ports["http"], facts.listenPort)
	}
	if rp := c.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/ready" || ports[rp.HTTPGet.Port.String()] != int32(facts.readyPort) {
		t.Errorf("Envoy readiness probe %+v: want GET /ready on the bootstrap's ready listener (%d)", rp, facts.readyPort)
	}
	svc := typed[corev1.Service](t, objs.get("", "Service", "switchyard-envoy"))
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service switchyard-envoy ports %+v: want one port targeting http", svc.Spec.Ports)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service switchyard-envoy does not select the Envoy pods")
	}
	eppSvc := typed[corev1.Service](t, objs.get("", "Service", eppName))
	if facts.eppHost != eppSvc.Name {
		t.Errorf("the EPP cluster resolves %q, want the EPP Service %q", facts.eppHost, eppSvc.Name)
	}
	var extProc int32
	for _, p := range eppSvc.Spec.Ports {
		if p.Name == "grpc-ext-proc" {
			extProc = p.Port
		}
	}
	if int32(facts.eppPort) != extProc {
		t.Errorf("the EPP cluster uses port %d, the Service's grpc-ext-proc is %d", facts.eppPort, extProc)
	}
}

// adminReaderFile is the ClusterRole that opens the admin API, shipped
// outside the kustomizations (they hold namespaced objects only).
const adminReaderFile = "cluster/admin-api-reader.yaml"

// adminReaderObjects returns the file's ClusterRole and the example
// ClusterRoleBinding its comment shows (uncommented).
func adminReaderObjects(t testing.TB) (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	t.Helper()
	data, err := os.ReadFile(adminReaderFile)
	if err != nil {
		t.Fatal(err)
	}
	u, err := decodeObject(data)
	if err != nil {
		t.Fatalf("%s: %v", adminReaderFile, err)
	}
	if u.GetKind() != "ClusterRole" || u.GetAPIVersion() != "rbac.authorization.k8s.io/v1" {
		t.Fatalf("%s holds %s, want one ClusterRole", adminReaderFile, describe(u))
	}
	// The example binding: the commented lines after "# ---".
	_, example, ok := strings.Cut(string(data), "\n# ---\n")
	if !ok {
		t.Fatalf("%s: no commented example binding after \"# ---\"", adminReaderFile)
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(example, "\n"), "\n") {
		if l != "#" && !strings.HasPrefix(l, "# ") {
			t.Fatalf("%s: example line %q is not commented", adminReaderFile, l)
		}
		b.WriteString(strings.TrimPrefix(strings.TrimPrefix(l, "#"), " ") + "\n")
	}
	bu, err := decodeObject([]byte(b.String()))
	if err != nil {
		t.Fatalf("%s: example binding: %v", adminReaderFile, err)
	}
	return typed[rbacv1.ClusterRole](t, u), typed[rbacv1.ClusterRoleBinding](t, bu)
}

// TestAdminReaderClusterRole: the shipped ClusterRole grants exactly get
// on the admin API's non-resource URLs (nothing else: no resources, no
// other verb or path), carries the removal label, and its example binding
// names it with a namespaced ServiceAccount subject.
func TestAdminReaderClusterRole(t *testing.T) {
	role, binding := adminReaderObjects(t)
	if role.Name != "switchyard-admin-api-reader" || role.Namespace != "" {
		t.Errorf("ClusterRole %s/%s, want switchyard-admin-api-reader without a namespace", role.Namespace, role.Name)
	}
	if role.Labels["app.kubernetes.io/part-of"] != "switchyard" {
		t.Errorf("ClusterRole %s lacks app.kubernetes.io/part-of=switchyard", role.Name)
	}
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/admin", "/admin/*"}, Verbs: []string{"get"}}}
	if !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.NonResourceURLs, b.NonResourceURLs) && slices.Equal(a.Verbs, b.Verbs) &&
			len(a.APIGroups)+len(a.Resources)+len(a.ResourceNames) == 0
	}) || role.AggregationRule != nil {
		t.Errorf("ClusterRole %s rules %+v, want exactly %+v", role.Name, role.Rules, want)
	}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}) {
		t.Errorf("example ClusterRoleBinding roleRef %+v, want ClusterRole %s", binding.RoleRef, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Namespace == "" {
		t.Errorf("example ClusterRoleBinding subjects %+v, want one ServiceAccount with its namespace", binding.Subjects)
	}
}
