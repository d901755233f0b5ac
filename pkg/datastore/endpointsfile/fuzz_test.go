package endpointsfile

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

// documentErrors are the problems of a whole file, which have no path.
var documentErrors = []string{"the file is empty", "a second YAML document", "not valid YAML", "expected an object"}

// FuzzEndpointsFile: Parse never panics; every problem it reports is a
// FieldError with a path (or a whole-document problem); what it accepts,
// the store accepts.
func FuzzEndpointsFile(f *testing.F) {
	for _, s := range []string{
		fileA, fileAB, broken, "endpoints: []\n", "",
		"endpoints:\n- {name: a, address: \"::1\", port: 1, labels: {k: v}, weight: 3, metricsPort: 2, metricsPath: /m, engine: vllm, namespace: ns, podName: p}\n",
		"endpoints:\n- name: a\n  address: 127.0.0.1\n  port: 1\n- name: a\n  address: 127.0.0.1\n  port: 1\n",
		"{\"endpoints\": [{\"name\": 1, \"zzz\": []}]}",
		"a: &x [*x]\n",
		"endpoints: [a, null, 3, {labels: [1]}]\n",
		"endpoints:\n- name: a\n  address: 127.0.0.1\n  port: 1\n  internal: true\n  models:\n  - {name: m, aliases: [x, y], pricing: {input: 0.1, output: 0.2}}\n  - {name: n}\n",
		"endpoints:\n- {name: a, address: 127.0.0.1, port: 1, models: [{name: m, aliases: [m]}, {aliases: [1], pricing: {input: -1, x: 1}}, q], internal: 1}\n",
		"endpoints:\n- {name: a, address: 127.0.0.1, port: 1, models: [{name: m, pricing: {}}, {name: o, pricing: {input: 1}}, {name: p, pricing: {output: null}}]}\n",
		"endpoints:\n- {name: a, address: 127.0.0.1, port: 1, scrape: false}\n- {name: b, address: 127.0.0.1, port: 2, scrape: 0}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		specs, err := Parse(data)
		if err == nil {
			store := datastore.New(datastore.Options{})
			if rerr := store.Replace(specs); rerr != nil {
				t.Fatalf("Parse accepted what the store refuses: %v", rerr)
			}
			return
		}
		var ve *datastore.ValidationError
		if !errors.As(err, &ve) || len(ve.Errors) == 0 {
			t.Fatalf("error is not a non-empty *ValidationError: %T %v", err, err)
		}
		for _, fe := range ve.Errors {
			if fe.Path != "" {
				continue
			}
			known := false
			for _, d := range documentErrors {
				known = known || strings.HasPrefix(fe.Msg, d)
			}
			if !known {
				t.Fatalf("error without a path: %q", fe.Msg)
			}
		}
	})
}
