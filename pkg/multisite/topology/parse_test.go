package topology

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var local = Local{Site: "site-a", Cluster: "cluster-a"}

const threeSites = `# The three sites of the e2e.
sites:
- name: site-a
  cluster: cluster-a
  models: [llama]
- name: site-b
  cluster: cluster-b.example
  gateway: 10.1.0.2:443
  models: [mistral, llama]
- name: site-c
  cluster: cluster-c
  gateway: "[::1]:8443"
`

func TestParse(t *testing.T) {
	sites, err := Parse([]byte(threeSites), local)
	require.NoError(t, err)
	want := []Site{
		{Name: "site-a", Cluster: "cluster-a", Models: []string{"llama"}},
		{Name: "site-b", Cluster: "cluster-b.example", Gateway: "10.1.0.2:443", Models: []string{"llama", "mistral"}},
		{Name: "site-c", Cluster: "cluster-c", Gateway: "[::1]:8443"},
	}
	if d := cmp.Diff(want, sites); d != "" {
		t.Fatalf("Parse (-want +got):\n%s", d)
	}
	for _, empty := range []string{"sites: []\n", "sites:\n", `{"sites": []}`} {
		sites, err := Parse([]byte(empty), local)
		require.NoError(t, err, empty)
		assert.Empty(t, sites)
	}
}

// TestParseErrors: every problem is reported at once, with its path.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // "path: message fragment"
	}{
		{"empty", "", []string{": the file is empty"}},
		{"comments only", "# nothing\n", []string{": the file is empty"}},
		{"not an object", "- a\n", []string{": expected an object with a sites list, got a list"}},
		{"not YAML", "sites: [\n", []string{": not valid YAML"}},
		{"second document", "sites: []\n---\nsites: []\n", []string{": a second YAML document starts at line 2"}},
		{"duplicate key", "sites: []\nsites: []\n", []string{": not valid YAML"}},
		{"sites missing", "site: []\n", []string{`site: unknown field "site" (did you mean "sites"?)`, "sites: required"}},
		{"sites not a list", "sites: {}\n", []string{"sites: expected a list, got an object"}},
		{"entry not an object", "sites: [x]\n", []string{"sites[0]: expected an object, got a string"}},
		{"fields", `sites:
- name: Site_B
  cluster: -bad
  gateway: nohost
  models: [" spaced", 3, ""]
  zone: eu
- cluster: c
  gateway: "gw:0"
  models: x
- name: site-d
  cluster: d
  gateway: "300.1.2.3:80"
- name: site-e
  cluster: e
  gateway: "[fe80::1%eth0]:80"
`, []string{
			`sites[0].zone: unknown field "zone" (allowed: name, cluster, gateway, models)`,
			"sites[0].name: \"Site_B\" must be a DNS-1123 label",
			"sites[0].cluster: \"-bad\" must be a DNS-1123 subdomain",
			"sites[0].gateway: \"nohost\" is not ip:port",
			"sites[0].models[0]: \" spaced\": must not contain spaces",
			"sites[0].models[1]: expected a model name (a string), got a number",
			"sites[0].models[2]: must not be empty",
			"sites[1].name: required",
			"sites[1].gateway: \"gw:0\": the port must be 1..65535",
			"sites[1].models: expected a list of model names, got a string",
			"sites[2].gateway: \"300.1.2.3:80\": the host is not a valid IPv4 address",
			"sites[3].gateway: \"[fe80::1%eth0]:80\": an IPv6 zone is not allowed",
		}},
		{"duplicates", `sites:
- {name: b, cluster: c1, gateway: "10.0.0.1:1", models: [m, m]}
- {name: b, cluster: c1, gateway: "10.0.0.1:2"}
`, []string{
			`sites[0].models[1]: "m" is also models[0]`,
			`sites[1].name: "b" is also the name of sites[0]`,
			`sites[1].cluster: "c1" is also the cluster of sites[0]`,
		}},
		// The data plane routes to literal addresses (ORIGINAL_DST-like),
		// so a gateway named by a host name could never take a request.
		{"gateway a host name", "sites:\n- {name: b, cluster: c1, gateway: \"10.0.0.2:443\"}\n- {name: c, cluster: c2, gateway: gw.example:443}\n",
			[]string{`sites[1].gateway: "gw.example:443": the host must be an IP address`}},
		{"gateway required for a remote site", "sites: [{name: b, cluster: c}]\n", []string{"sites[0].gateway: required"}},
		{"local site with another cluster", "sites: [{name: site-a, cluster: other}]\n", []string{`sites[0].cluster: site "site-a" is the local site, whose cluster is "cluster-a"`}},
		{"another site with the local cluster", "sites: [{name: b, cluster: cluster-a, gateway: \"10.0.0.1:1\"}]\n", []string{`sites[0].cluster: "cluster-a" is the local site's cluster`}},
		{"typo", "sites: [{name: b, clustr: c, gateway: \"10.0.0.1:1\"}]\n", []string{`sites[0].clustr: unknown field "clustr" (did you mean "cluster"?)`, "sites[0].cluster: required"}},
		{"alias bomb", "a: &a [x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
			[]string{": the document is more than 1048576 bytes once its YAML aliases are expanded"}},
		{"too many sites", "sites:\n" + strings.Repeat("- {name: x}\n", MaxSites+1), []string{"sites: 65 sites exceed the limit of 64"}},
		{"too many with the local site", func() string {
			var b strings.Builder
			b.WriteString("sites:\n")
			for i := range MaxSites {
				b.WriteString("- {name: s" + string(rune('a'+i/26)) + string(rune('a'+i%26)) + ", cluster: c" + string(rune('a'+i/26)) + string(rune('a'+i%26)) + ", gateway: \"10.0.0.1:1\"}\n")
			}
			return b.String()
		}(), []string{`sites: 64 sites and the local site "site-a" exceed the limit of 64`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), local)
			require.Error(t, err)
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), "%T", err)
			assert.True(t, strings.HasPrefix(err.Error(), "invalid site topology: "), err.Error())
			var got []string
			for _, fe := range ve.Errors {
				got = append(got, fe.Path+": "+fe.Msg)
			}
			require.Len(t, got, len(tt.want), "got:\n%s", strings.Join(got, "\n"))
			for i, w := range tt.want {
				assert.True(t, strings.HasPrefix(got[i], w), "error %d:\n got %q\nwant %q...", i, got[i], w)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse(make([]byte, MaxFileBytes+1), local)
	require.ErrorContains(t, err, "more than the limit of 1048576")
}

func TestCanonicalGateway(t *testing.T) {
	for in, want := range map[string]string{
		"gw.example:443":    "",
		"GW.Example:443":    "",
		"10.0.0.1:443":      "10.0.0.1:443",
		"127.0.0.1:80":      "127.0.0.1:80",
		"[0:0::1]:80":       "[::1]:80",
		"localhost:1":       "",
		"10.0.0.1:65536":    "",
		"gw.example:+1":     "",
		"gw.example:01":     "",
		":80":               "",
		"gw.example":        "",
		"under_score.x:1":   "",
		"1.2.3:80":          "",
		"http://gw.example": "",
	} {
		got, err := CanonicalGateway(in)
		if want == "" {
			assert.Error(t, err, in)
			continue
		}
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

// TestReadmeExample: the topology the README's multi-site section shows
// is valid.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## Multi-site signals in the EPP\n")
	require.True(t, ok, "README has the section")
	_, block, ok := strings.Cut(section, "```yaml\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	sites, err := Parse([]byte(block), Local{Site: "eu-1", Cluster: "gke-eu-1"})
	require.NoError(t, err)
	assert.Len(t, sites, 2)
}
