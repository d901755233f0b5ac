package endpointsfile

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/internal/suggest"
	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
)

// Field names of an endpoint entry, in the order the documentation lists
// them.
var entryFields = []string{"name", "namespace", "podName", "address", "port", "labels", "weight", "metricsPort", "metricsPath", "engine", "models", "internal", "scrape", "providerTpm", "providerRpm"}

// Parse decodes and validates an endpoints file (YAML or JSON). Decoding
// is strict: an unknown or repeated key, a value of the wrong type, or a
// second YAML document is an error. It reports every problem at once as a
// *datastore.ValidationError whose FieldErrors carry paths such as
// `endpoints[2].port`; problems of the whole document (empty, not YAML, not
// an object) have an empty path. Defaults are applied by the store
// (weight 1, metrics port = port, metrics path from the metrics data
// source); an explicit weight of 0 is an error.
func Parse(data []byte) ([]datastore.EndpointSpec, error) {
	var errs datastore.ErrorList
	specs := decode(data, &errs)
	return specs, errs.Err()
}

func decode(data []byte, errs *datastore.ErrorList) []datastore.EndpointSpec {
	root, problem := yamldoc.Decode(data, yamldoc.Rules{
		Empty:      "the file is empty; write `endpoints: []` for an empty pool",
		Check:      checkDocuments,
		Strict:     true,
		NotDecoded: "not valid YAML",
		// Aliases may not make a small file expand past what a file may
		// hold ("billion laughs").
		MaxExpandedBytes: MaxFileBytes,
	})
	if problem != "" {
		errs.Add("", "%s", problem)
		return nil
	}
	obj, ok := root.(map[string]any)
	if !ok {
		errs.Add("", "expected an object with an endpoints list, got %s", yamldoc.TypeName(root))
		return nil
	}
	d := decoder{errs: errs, bad: map[string]bool{}}
	d.keys("", obj, "endpoints")
	raw, present := obj["endpoints"]
	if !present {
		errs.Add("endpoints", "required; write `endpoints: []` for an empty pool")
		return nil
	}
	if raw == nil {
		return []datastore.EndpointSpec{}
	}
	list, ok := raw.([]any)
	if !ok {
		errs.Add("endpoints", "expected a list, got %s", yamldoc.TypeName(raw))
		return nil
	}
	if len(list) > MaxEndpoints {
		errs.Add("endpoints", "%d endpoints exceed the limit of %d", len(list), MaxEndpoints)
		return nil
	}
	specs := make([]datastore.EndpointSpec, len(list))
	for i, item := range list {
		d.entry(fmt.Sprintf("endpoints[%d]", i), item, &specs[i])
	}
	// Semantic checks, minus the fields that already failed to decode.
	var sem datastore.ErrorList
	datastore.CheckSpecs(&sem, "endpoints", specs)
	if err := sem.Err(); err != nil {
		for _, fe := range err.(*datastore.ValidationError).Errors {
			if !d.covered(fe.Path) {
				errs.Add(fe.Path, "%s", fe.Msg)
			}
		}
	}
	if errs.Len() > 0 {
		return nil
	}
	return specs
}

// checkDocuments refuses a second YAML document.
func checkDocuments(data []byte) string {
	if line := secondDocument(data); line > 0 {
		return fmt.Sprintf("a second YAML document starts at line %d; an endpoints file holds exactly one", line)
	}
	return ""
}

// secondDocument returns the line where a second, non-empty YAML document
// starts, or 0. Document markers ("---") are recognised at the start of a
// line, where YAML requires them; a trailing marker with nothing after it
// is harmless.
func secondDocument(data []byte) int {
	content, marker := false, 0
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, " \t\r")
		rest, isMarker := "", false
		switch {
		case line == "---":
			isMarker = true
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "---\t"):
			isMarker, rest = true, strings.TrimSpace(line[3:])
		case line == "...":
			continue
		default:
			rest = strings.TrimSpace(line)
		}
		if isMarker && content && marker == 0 {
			marker = i + 1
		}
		if rest != "" && !strings.HasPrefix(rest, "#") {
			if marker > 0 {
				return marker
			}
			content = true
		}
	}
	return 0
}

type decoder struct {
	errs *datastore.ErrorList
	// bad holds the paths that failed to decode.
	bad map[string]bool
}

func (d decoder) fail(path, format string, args ...any) {
	d.bad[path] = true
	d.errs.Add(path, format, args...)
}

// covered reports whether path is, or lies under, a path that failed to
// decode.
func (d decoder) covered(path string) bool {
	for p := path; p != ""; {
		if d.bad[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			return false
		}
		p = p[:i]
	}
	return false
}

func (d decoder) keys(path string, obj map[string]any, allowed ...string) {
	for _, k := range yamldoc.UnknownKeys(obj, allowed) {
		msg := fmt.Sprintf("unknown field %q", k)
		if s := closest(k, allowed); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else {
			msg += " (allowed: " + strings.Join(allowed, ", ") + ")"
		}
		d.errs.Add(keyPath(path, k), "%s", msg)
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

func (d decoder) entry(path string, v any, sp *datastore.EndpointSpec) {
	obj, ok := v.(map[string]any)
	if !ok {
		d.fail(path, "expected an object, got %s", yamldoc.TypeName(v))
		return
	}
	d.keys(path, obj, entryFields...)
	d.str(path+".name", obj, "name", &sp.Name)
	d.str(path+".namespace", obj, "namespace", &sp.Namespace)
	d.str(path+".podName", obj, "podName", &sp.PodName)
	d.str(path+".address", obj, "address", &sp.Address)
	d.int(path+".port", obj, "port", &sp.Port)
	d.int(path+".metricsPort", obj, "metricsPort", &sp.MetricsPort)
	d.str(path+".metricsPath", obj, "metricsPath", &sp.MetricsPath)
	d.str(path+".engine", obj, "engine", &sp.Engine)
	if d.int(path+".weight", obj, "weight", &sp.Weight) && sp.Weight == 0 {
		d.fail(path+".weight", "must be 1..%d, got 0 (leave it out for the default 1; remove the endpoint to stop sending it requests)", datastore.MaxWeight)
	}
	if d.int(path+".providerTpm", obj, "providerTpm", &sp.ProviderTPM) && sp.ProviderTPM == 0 {
		d.fail(path+".providerTpm", "must be 1..%d tokens per minute, got 0 (leave it out when the provider declares no limit)", datastore.MaxProviderLimit)
	}
	if d.int(path+".providerRpm", obj, "providerRpm", &sp.ProviderRPM) && sp.ProviderRPM == 0 {
		d.fail(path+".providerRpm", "must be 1..%d requests per minute, got 0 (leave it out when the provider declares no limit)", datastore.MaxProviderLimit)
	}
	d.bool(path+".internal", obj, "internal", &sp.Internal)
	scrape := true
	d.bool(path+".scrape", obj, "scrape", &scrape)
	sp.NoScrape = !scrape
	if raw, ok := obj["models"]; ok {
		models, bad := datastore.DecodeModels(d.errs, path+".models", raw)
		if bad {
			// Its semantic checks would repeat the decoding problems.
			d.bad[path+".models"] = true
		} else {
			sp.Models = models
		}
	}
	if raw, ok := obj["labels"]; ok && raw != nil {
		lp := path + ".labels"
		lo, ok := raw.(map[string]any)
		if !ok {
			d.fail(lp, "expected an object of label keys and values, got %s", yamldoc.TypeName(raw))
			return
		}
		sp.Labels = make(map[string]string, len(lo))
		for k, lv := range lo {
			s, ok := lv.(string)
			if !ok {
				hint := ""
				if lv != nil {
					hint = fmt.Sprintf(" (quote it: \"%v\")", lv)
				}
				d.fail(fmt.Sprintf("%s[%q]", lp, k), "expected a string, got %s%s", yamldoc.TypeName(lv), hint)
				continue
			}
			sp.Labels[k] = s
		}
	}
}

// str decodes an optional string field; null counts as absent.
func (d decoder) str(path string, obj map[string]any, key string, dst *string) {
	v, ok := obj[key]
	if !ok || v == nil {
		return
	}
	s, ok := v.(string)
	if !ok {
		d.fail(path, "expected a string, got %s", yamldoc.TypeName(v))
		return
	}
	*dst = s
}

// bool decodes an optional boolean field; null counts as absent.
func (d decoder) bool(path string, obj map[string]any, key string, dst *bool) {
	v, ok := obj[key]
	if !ok || v == nil {
		return
	}
	b, ok := v.(bool)
	if !ok {
		d.fail(path, "expected true or false, got %s", yamldoc.TypeName(v))
		return
	}
	*dst = b
}

// int decodes an optional integer field and reports whether it was set.
func (d decoder) int(path string, obj map[string]any, key string, dst *int) bool {
	v, ok := obj[key]
	if !ok || v == nil {
		return false
	}
	n, ok := v.(json.Number)
	if !ok {
		d.fail(path, "expected an integer, got %s", yamldoc.TypeName(v))
		return false
	}
	i, err := n.Int64()
	if err != nil {
		if f, ferr := n.Float64(); ferr == nil && f == math.Trunc(f) {
			d.fail(path, "%s is out of range", n)
		} else {
			d.fail(path, "expected an integer, got %s", n)
		}
		return false
	}
	if i > math.MaxInt32 || i < math.MinInt32 {
		d.fail(path, "%s is out of range", n)
		return false
	}
	*dst = int(i)
	return true
}

// closest returns the candidate within edit distance 2 of s, if any,
// ignoring case; words longer than 64 bytes get no suggestion.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	ls := strings.ToLower(s)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if len(ls) > 64 || len(lc) > 64 {
			continue
		}
		if dist := suggest.Distance(ls, lc); dist < bestD {
			best, bestD = c, dist
		}
	}
	return best
}
