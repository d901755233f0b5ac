package topology

import (
	"errors"
	"strings"
	"testing"
)

// documentErrors are the problems of a whole file, which have no path.
var documentErrors = []string{"the file is empty", "a second YAML document", "not valid YAML", "expected an object", "the document is more than", "the file is"}

// FuzzTopologyFile: Parse never panics; every problem it reports is a
// FieldError with a path (or a whole-document problem); what it accepts
// is valid (canonical gateways, sorted models, unique names and clusters)
// and Build keeps it within MaxSites with the local site in it.
func FuzzTopologyFile(f *testing.F) {
	for _, s := range []string{
		threeSites, "sites: []\n", "", "sites:\n",
		"sites: [{name: b, cluster: c, gateway: \"[::1]:1\", models: [m, n]}]\n",
		"sites: [{name: site-a, cluster: cluster-a}]\n",
		"sites: [{name: b, cluster: b, gateway: \"b:1\"}, {name: b, cluster: b, gateway: \"b:1\"}]\n",
		"{\"sites\": [{\"name\": 1, \"zzz\": []}]}",
		"a: &x [*x]\n",
		"sites: [a, null, 3, {models: [1]}]\n---\nx: 1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		sites, err := Parse(data, local)
		if err != nil {
			var ve *ValidationError
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
			return
		}
		names, clusters := map[string]bool{}, map[string]bool{}
		for i, s := range sites {
			if names[s.Name] || clusters[s.Cluster] {
				t.Fatalf("sites[%d]: duplicate name or cluster accepted: %+v", i, s)
			}
			names[s.Name], clusters[s.Cluster] = true, true
			if s.Name != local.Site {
				if c, err := CanonicalGateway(s.Gateway); err != nil || c != s.Gateway {
					t.Fatalf("sites[%d]: gateway %q not canonical (%v)", i, s.Gateway, err)
				}
			}
			for j := 1; j < len(s.Models); j++ {
				if s.Models[j-1] >= s.Models[j] {
					t.Fatalf("sites[%d]: models not sorted and unique: %q", i, s.Models)
				}
			}
		}
		top, _ := Build(local, sites, nil)
		if top.Len() > MaxSites || !top.Local().Local || top.Local().Name != local.Site {
			t.Fatalf("Build: %d sites, local %+v", top.Len(), top.Local())
		}
	})
}
