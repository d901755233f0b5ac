package kubesource

import (
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Pod annotations under Switchyard's own domain that give every endpoint
// (rank) of a pod what the endpoints file's fields give an endpoint in
// standalone mode. An invalid value is logged once (per pod and value)
// and ignored: the pod still serves, without that data.
const (
	// WeightAnnotation is the endpoints' relative capacity, an integer
	// 1..datastore.MaxWeight (scheduling.WeightKey); absent means 1.
	WeightAnnotation = "switchyard.ai/weight"
	// ModelsAnnotation lists the models the pod serves, a JSON or YAML
	// list as the endpoints file's models
	// ([{name, aliases, pricing: {input, output}}]; scheduling.ModelsKey);
	// absent means every model.
	ModelsAnnotation = "switchyard.ai/models"
	// InternalAnnotation reserves the pod's endpoints for internal callers
	// when "true" (scheduling.InternalKey); "false" or absent means not.
	InternalAnnotation = "switchyard.ai/internal"
	// ScrapeAnnotation, when "false", says the pod's endpoints have no
	// metrics to read (datastore.EndpointSpec.NoScrape): they are not
	// scraped, count as fresh, and their load is not measured; "true" or
	// absent means they are scraped.
	ScrapeAnnotation = "switchyard.ai/scrape"
	// ProviderTPMAnnotation and ProviderRPMAnnotation declare the tokens
	// and requests per minute the provider behind the pod allows, integers
	// 1..datastore.MaxProviderLimit (datastore.EndpointSpec.ProviderTPM,
	// ProviderRPM; advisory, read by the usage-weight-scorer); absent
	// means not declared.
	ProviderTPMAnnotation = "switchyard.ai/provider-tpm"
	ProviderRPMAnnotation = "switchyard.ai/provider-rpm"
)

// annotations are the annotations the pod cache keeps (TrimPod).
var annotations = []string{ActivePortsAnnotation, WeightAnnotation, ModelsAnnotation, InternalAnnotation, ScrapeAnnotation, ProviderTPMAnnotation, ProviderRPMAnnotation}

// PodData is what a pod's switchyard.ai annotations give each of its
// endpoints.
type PodData struct {
	// Weight is WeightAnnotation's value, 0 when absent or invalid (the
	// store's default 1).
	Weight int
	// Models is ModelsAnnotation's value, nil when absent or invalid.
	Models []scheduling.ModelEntry
	// Internal is InternalAnnotation's value.
	Internal bool
	// NoScrape is true when ScrapeAnnotation is "false".
	NoScrape bool
	// ProviderTPM and ProviderRPM are ProviderTPMAnnotation's and
	// ProviderRPMAnnotation's values, 0 when absent or invalid.
	ProviderTPM int
	ProviderRPM int
}

// AnnotationProblem is an annotation value that was ignored.
type AnnotationProblem struct {
	// Pod is "namespace/name".
	Pod string
	// Annotation is the annotation's key.
	Annotation string
	// Problem says what is wrong with the value.
	Problem string
	// hash identifies the value, so that it is logged once.
	hash uint64
}

func (p AnnotationProblem) String() string {
	return fmt.Sprintf("pod %s: annotation %s ignored: %s", p.Pod, p.Annotation, p.Problem)
}

// modelsResult is a parsed ModelsAnnotation value.
type modelsResult struct {
	models []scheduling.ModelEntry
	err    string
}

// annotationReader reads pods' annotations, remembering parsed model
// lists by value: a reconcile reads every pod, and most pods of a pool
// carry the same list. Not safe for concurrent use (reconciles run one
// at a time).
type annotationReader struct {
	seed       maphash.Seed
	models     map[string]modelsResult // this pass's parses
	prevModels map[string]modelsResult // the previous pass's
}

func newAnnotationReader() *annotationReader {
	return &annotationReader{seed: maphash.MakeSeed()}
}

// pass starts a reconcile pass: parses the previous pass did not use are
// forgotten.
func (r *annotationReader) pass() {
	r.prevModels, r.models = r.models, map[string]modelsResult{}
}

// ReadAnnotations reads a pod's switchyard.ai annotations. Each invalid
// value is ignored (its field stays zero) and described in problems.
func ReadAnnotations(pod *corev1.Pod) (PodData, []AnnotationProblem) {
	r := newAnnotationReader()
	r.pass()
	return r.read(pod)
}

func (r *annotationReader) read(pod *corev1.Pod) (d PodData, problems []AnnotationProblem) {
	if len(pod.Annotations) == 0 {
		return d, nil
	}
	bad := func(key, value, format string, args ...any) {
		problems = append(problems, AnnotationProblem{
			Pod: pod.Namespace + "/" + pod.Name, Annotation: key,
			Problem: fmt.Sprintf(format, args...), hash: maphash.String(r.seed, value),
		})
	}
	if v, ok := pod.Annotations[WeightAnnotation]; ok {
		w, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || w < 1 || w > datastore.MaxWeight {
			bad(WeightAnnotation, v, "want an integer 1..%d, got %q", datastore.MaxWeight, clip(v))
		} else {
			d.Weight = w
		}
	}
	for _, a := range [...]struct {
		key  string
		unit string
		dst  *int
	}{{ProviderTPMAnnotation, "tokens", &d.ProviderTPM}, {ProviderRPMAnnotation, "requests", &d.ProviderRPM}} {
		if v, ok := pod.Annotations[a.key]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 1 || n > datastore.MaxProviderLimit {
				bad(a.key, v, "want an integer 1..%d (%s per minute), got %q", datastore.MaxProviderLimit, a.unit, clip(v))
			} else {
				*a.dst = n
			}
		}
	}
	if v, ok := pod.Annotations[InternalAnnotation]; ok {
		switch strings.TrimSpace(v) {
		case "true":
			d.Internal = true
		case "false":
		default:
			bad(InternalAnnotation, v, `want "true" or "false", got %q`, clip(v))
		}
	}
	if v, ok := pod.Annotations[ScrapeAnnotation]; ok {
		switch strings.TrimSpace(v) {
		case "false":
			d.NoScrape = true
		case "true":
		default:
			bad(ScrapeAnnotation, v, `want "true" or "false", got %q`, clip(v))
		}
	}
	if v, ok := pod.Annotations[ModelsAnnotation]; ok {
		res, seen := r.models[v]
		if !seen {
			if res, seen = r.prevModels[v]; !seen {
				m, err := datastore.ParseModels([]byte(v), "models")
				res = modelsResult{models: m}
				if err != nil {
					res = modelsResult{err: problemText(err)}
				}
			}
			r.models[v] = res
		}
		if res.err != "" {
			bad(ModelsAnnotation, v, "%s", res.err)
		} else {
			// The store copies the list it keeps; every rank may share it.
			d.Models = res.models
		}
	}
	return d, problems
}

// problemText lists a validation error's problems without the
// "invalid endpoints" prefix.
func problemText(err error) string {
	ve, ok := err.(*datastore.ValidationError)
	if !ok {
		return err.Error()
	}
	parts := make([]string, 0, len(ve.Errors))
	for _, fe := range ve.Errors {
		parts = append(parts, fe.Path+": "+fe.Msg)
	}
	return strings.Join(parts, "; ")
}

// clip shortens a value quoted in a message.
func clip(v string) string {
	if len(v) > 64 {
		return v[:64] + "…"
	}
	return v
}
