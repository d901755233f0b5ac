package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/switchyard-ai/switchyard/pkg/internal/suggest"
	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
)

// MaxFileBytes bounds a topology file.
const MaxFileBytes = 1 << 20

var (
	topFields  = []string{"sites"}
	siteFields = []string{"name", "cluster", "gateway", "models"}
)

// Parse decodes and validates a topology file (YAML or JSON):
//
//	sites:
//	- name: site-b                # DNS-1123 label (grid_site); unique
//	  cluster: cluster-b          # DNS-1123 subdomain (grid_cluster); unique
//	  gateway: 10.20.0.10:443     # ip:port, no host name; required but for the local site
//	  models: [llama-3-8b]        # optional; empty: every model
//
// Decoding is strict: an unknown or repeated key, a value of the wrong
// type or a second YAML document is an error. local, when its Site is
// set, is the EPP's own site: its entry may leave out the gateway, and its
// cluster must be local.Cluster. Every problem is reported at once as a
// *ValidationError with paths such as `sites[2].gateway`; problems of the
// whole file have an empty path. The sites come back in file order, with
// canonical gateway addresses and sorted models.
func Parse(data []byte, local Local) ([]Site, error) {
	var errs errorList
	sites := decode(data, local, &errs)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return sites, nil
}

func decode(data []byte, local Local, errs *errorList) []Site {
	if len(data) > MaxFileBytes {
		errs.Add("", "the file is %d bytes, more than the limit of %d", len(data), MaxFileBytes)
		return nil
	}
	root, problem := yamldoc.Decode(data, yamldoc.Rules{
		Empty:            "the file is empty; write `sites: []` for a topology of the local site alone",
		Check:            checkDocuments,
		Strict:           true,
		NotDecoded:       "not valid YAML",
		MaxExpandedBytes: MaxFileBytes,
	})
	if problem != "" {
		errs.Add("", "%s", problem)
		return nil
	}
	obj, ok := root.(map[string]any)
	if !ok {
		errs.Add("", "expected an object with a sites list, got %s", yamldoc.TypeName(root))
		return nil
	}
	unknownKeys(errs, "", obj, topFields)
	raw, present := obj["sites"]
	if !present {
		errs.Add("sites", "required; write `sites: []` for a topology of the local site alone")
		return nil
	}
	if raw == nil {
		return []Site{}
	}
	list, ok := raw.([]any)
	if !ok {
		errs.Add("sites", "expected a list, got %s", yamldoc.TypeName(raw))
		return nil
	}
	if len(list) > MaxSites {
		errs.Add("sites", "%d sites exceed the limit of %d", len(list), MaxSites)
		return nil
	}
	sites := make([]Site, len(list))
	names := make(map[string]int, len(list))
	clusters := make(map[string]int, len(list))
	for i, item := range list {
		p := "sites[" + strconv.Itoa(i) + "]"
		s := &sites[i]
		site(errs, p, item, s, local)
		if s.Name != "" {
			if j, dup := names[s.Name]; dup {
				errs.Add(p+".name", "%q is also the name of sites[%d]; names must be unique", s.Name, j)
			} else {
				names[s.Name] = i
			}
		}
		if s.Cluster != "" {
			if j, dup := clusters[s.Cluster]; dup {
				errs.Add(p+".cluster", "%q is also the cluster of sites[%d]; each site has its own cluster (InferencePoolImport status names sites by cluster)", s.Cluster, j)
			} else {
				clusters[s.Cluster] = i
			}
		}
	}
	if local.Site != "" {
		// The local site always exists; a file that gives another site
		// the local cluster would make its rows ambiguous.
		if j, ok := clusters[local.Cluster]; ok && sites[j].Name != local.Site {
			errs.Add("sites["+strconv.Itoa(j)+"].cluster", "%q is the local site's cluster (--site-cluster, site %q)", local.Cluster, local.Site)
		}
		if _, listed := names[local.Site]; !listed && len(list)+1 > MaxSites {
			errs.Add("sites", "%d sites and the local site %q exceed the limit of %d", len(list), local.Site, MaxSites)
		}
	}
	return sites
}

func site(errs *errorList, path string, v any, s *Site, local Local) {
	obj, ok := v.(map[string]any)
	if !ok {
		errs.Add(path, "expected an object, got %s", yamldoc.TypeName(v))
		return
	}
	unknownKeys(errs, path, obj, siteFields)
	if str(errs, path+".name", obj, "name", &s.Name, true) {
		if err := signals.ValidateLabel(s.Name); err != nil {
			errs.Add(path+".name", "%v", err)
			s.Name = ""
		}
	}
	isLocal := local.Site != "" && s.Name == local.Site
	if str(errs, path+".cluster", obj, "cluster", &s.Cluster, true) {
		switch err := signals.ValidateSubdomain(s.Cluster); {
		case err != nil:
			errs.Add(path+".cluster", "%v", err)
			s.Cluster = ""
		case isLocal && s.Cluster != local.Cluster:
			errs.Add(path+".cluster", "site %q is the local site, whose cluster is %q (--site-cluster), not %q", s.Name, local.Cluster, s.Cluster)
		}
	}
	var gw string
	if str(errs, path+".gateway", obj, "gateway", &gw, !isLocal) {
		c, err := CanonicalGateway(gw)
		if err != nil {
			errs.Add(path+".gateway", "%v", err)
		}
		s.Gateway = c
	}
	raw, ok := obj["models"]
	if !ok || raw == nil {
		return
	}
	list, ok := raw.([]any)
	if !ok {
		errs.Add(path+".models", "expected a list of model names, got %s", yamldoc.TypeName(raw))
		return
	}
	if len(list) > MaxModelsPerSite {
		errs.Add(path+".models", "%d models exceed the limit of %d", len(list), MaxModelsPerSite)
		return
	}
	seen := make(map[string]int, len(list))
	for i, item := range list {
		mp := path + ".models[" + strconv.Itoa(i) + "]"
		m, ok := item.(string)
		if !ok {
			errs.Add(mp, "expected a model name (a string), got %s", yamldoc.TypeName(item))
			continue
		}
		if msg := checkModel(m); msg != "" {
			errs.Add(mp, "%s", msg)
			continue
		}
		if j, dup := seen[m]; dup {
			errs.Add(mp, "%q is also models[%d]", m, j)
			continue
		}
		seen[m] = i
		s.Models = append(s.Models, m)
	}
	slices.Sort(s.Models)
}

// str decodes a string field and reports whether it was set to a
// non-empty string; a missing required field is an error.
func str(errs *errorList, path string, obj map[string]any, key string, dst *string, required bool) bool {
	v, ok := obj[key]
	if !ok || v == nil {
		if required {
			errs.Add(path, "required")
		}
		return false
	}
	s, ok := v.(string)
	if !ok {
		errs.Add(path, "expected a string, got %s", yamldoc.TypeName(v))
		return false
	}
	if s == "" {
		if required {
			errs.Add(path, "must not be empty")
		}
		return false
	}
	*dst = s
	return true
}

func unknownKeys(errs *errorList, path string, obj map[string]any, allowed []string) {
	for _, k := range yamldoc.UnknownKeys(obj, allowed) {
		msg := fmt.Sprintf("unknown field %q", k)
		if s := closest(k, allowed); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else {
			msg += " (allowed: " + strings.Join(allowed, ", ") + ")"
		}
		errs.Add(keyPath(path, k), "%s", msg)
	}
}

// keyPath is the path of key k under path: path.k, or path["k"] when k is
// not a plain word.
func keyPath(path, k string) string {
	plain := k != ""
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(k) + "]"
	case path == "":
		return k
	}
	return path + "." + k
}

// closest returns the candidate within edit distance 2 of s, ignoring
// case; words longer than 64 bytes get no suggestion.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	ls := strings.ToLower(s)
	if len(ls) > 64 {
		return ""
	}
	for _, c := range candidates {
		if d := suggest.Distance(ls, strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// checkDocuments refuses a second non-empty YAML document.
func checkDocuments(data []byte) string {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return "" // the converter reports the syntax error
		}
		if len(doc.Content) == 0 {
			continue
		}
		if n++; n > 1 {
			return fmt.Sprintf("a second YAML document starts at line %d; a topology file holds exactly one", doc.Line)
		}
	}
}
