package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// decode parses a YAML or JSON document into an EndpointPickerConfig. It
// checks every key against the schema and every value against its type,
// and records each problem with its path instead of stopping at the first.
// maxBytes bounds the document once its YAML aliases are expanded, as
// Load bounds it before.
func decode(data []byte, maxBytes int, errs *errorList) *EndpointPickerConfig {
	root, problem := yamldoc.Decode(data, yamldoc.Rules{
		Empty:            "the configuration is empty",
		Check:            checkDocuments,
		NotDecoded:       "not valid JSON",
		MaxExpandedBytes: int64(maxBytes),
	})
	if problem != "" {
		errs.Add("", "%s", problem)
		return nil
	}
	d := decoder{errs: errs}
	obj, ok := d.object("", root)
	if !ok {
		return nil
	}
	cfg := &EndpointPickerConfig{}
	d.keys("", obj, "apiVersion", "kind", "featureGates", "plugins", "schedulingProfiles", "saturationDetector", "dataLayer", "data", "flowControl", "parser", "fallbackChains", "prefixRouting", "availability")
	cfg.APIVersion = d.str("apiVersion", obj["apiVersion"])
	cfg.Kind = d.str("kind", obj["kind"])
	for i, g := range d.list("featureGates", obj["featureGates"]) {
		cfg.FeatureGates = append(cfg.FeatureGates, d.str(index("featureGates", i), g))
	}
	for i, p := range d.list("plugins", obj["plugins"]) {
		path := index("plugins", i)
		po, ok := d.object(path, p)
		if !ok {
			cfg.Plugins = append(cfg.Plugins, PluginSpec{})
			continue
		}
		d.keys(path, po, "name", "type", "parameters")
		spec := PluginSpec{Name: d.str(field(path, "name"), po["name"]), Type: d.str(field(path, "type"), po["type"])}
		if params, ok := po["parameters"]; ok && params != nil {
			raw, err := json.Marshal(params)
			if err != nil {
				errs.Add(field(path, "parameters"), "%v", err)
			}
			spec.Parameters = raw
		}
		cfg.Plugins = append(cfg.Plugins, spec)
	}
	for i, p := range d.list("schedulingProfiles", obj["schedulingProfiles"]) {
		path := index("schedulingProfiles", i)
		po, ok := d.object(path, p)
		if !ok {
			cfg.SchedulingProfiles = append(cfg.SchedulingProfiles, SchedulingProfile{})
			continue
		}
		d.keys(path, po, "name", "plugins")
		prof := SchedulingProfile{Name: d.str(field(path, "name"), po["name"])}
		for j, r := range d.list(field(path, "plugins"), po["plugins"]) {
			rpath := index(field(path, "plugins"), j)
			ro, ok := d.object(rpath, r)
			if !ok {
				prof.Plugins = append(prof.Plugins, SchedulingPlugin{})
				continue
			}
			d.keys(rpath, ro, "pluginRef", "weight")
			ref := SchedulingPlugin{PluginRef: d.str(field(rpath, "pluginRef"), ro["pluginRef"])}
			if w, ok := ro["weight"]; ok && w != nil {
				ref.Weight = d.float(field(rpath, "weight"), w)
			}
			prof.Plugins = append(prof.Plugins, ref)
		}
		cfg.SchedulingProfiles = append(cfg.SchedulingProfiles, prof)
	}
	if v, ok := obj["saturationDetector"]; ok && v != nil {
		if so, ok := d.object("saturationDetector", v); ok {
			d.keys("saturationDetector", so, "pluginRef", "queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold")
			sd := &SaturationDetectorConfig{
				PluginRef:                 d.str("saturationDetector.pluginRef", so["pluginRef"]),
				MetricsStalenessThreshold: d.str("saturationDetector.metricsStalenessThreshold", so["metricsStalenessThreshold"]),
			}
			if q, ok := so["queueDepthThreshold"]; ok && q != nil {
				sd.QueueDepthThreshold = d.int("saturationDetector.queueDepthThreshold", q)
			}
			if k, ok := so["kvCacheUtilThreshold"]; ok && k != nil {
				sd.KVCacheUtilThreshold = d.float("saturationDetector.kvCacheUtilThreshold", k)
			}
			cfg.SaturationDetector = sd
		}
	}
	// A key with a null value (`dataLayer:` and nothing under it) is the
	// same as an absent one, as GIE decodes it into a nil pointer.
	hasDL := obj["dataLayer"] != nil
	hasData := obj["data"] != nil
	switch {
	case hasDL && hasData:
		errs.Add("data", "both dataLayer and its older name data are set; keep only dataLayer")
	case hasDL:
		cfg.DataLayer = d.dataLayer("dataLayer", obj["dataLayer"])
	case hasData:
		cfg.DataLayer = d.dataLayer("data", obj["data"])
	}
	if v, ok := obj["parser"]; ok && v != nil {
		if po, ok := d.object("parser", v); ok {
			d.keys("parser", po, "pluginRef")
			cfg.Parser = &ParserConfig{PluginRef: d.str("parser.pluginRef", po["pluginRef"])}
		}
	}
	if v, ok := obj["flowControl"]; ok && v != nil {
		cfg.FlowControl = d.flowControl("flowControl", v)
	}
	if v, ok := obj["fallbackChains"]; ok && v != nil {
		cfg.FallbackChains = d.fallbackChains("fallbackChains", v)
	}
	if v, ok := obj["prefixRouting"]; ok && v != nil {
		cfg.PrefixRouting = d.prefixRouting("prefixRouting", v)
	}
	if v, ok := obj["availability"]; ok && v != nil {
		cfg.Availability = d.availability("availability", v)
	}
	return cfg
}

// checkDocuments reports a YAML syntax error, a key given twice, or more
// than one document.
func checkDocuments(data []byte) string {
	n, err := checkYAML(data)
	if err != nil {
		return "not valid YAML: " + yamldoc.Message(err)
	}
	if n > 1 {
		return fmt.Sprintf("the file holds %d YAML documents; an EndpointPickerConfig file holds exactly one", n)
	}
	return ""
}

// checkYAML parses every document of data and returns how many are not
// empty. It reports syntax errors and keys given twice (GIE's strict
// decoder rejects those too; otherwise the last one would silently win)
// with the line numbers of both.
func checkYAML(data []byte) (int, error) {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if doc != nil {
			n++
		}
	}
}

type decoder struct{ errs *errorList }

// keys reports every key of obj that is not in allowed, sorted.
func (d decoder) keys(path string, obj map[string]any, allowed ...string) {
	for _, k := range yamldoc.UnknownKeys(obj, allowed) {
		msg := fmt.Sprintf("unknown field %q", k)
		if c := snakeToCamel(k); c != k && slices.Contains(allowed, c) {
			// The seeds and some charts spell keys in snake_case
			// (ceiling_half_life_ms, G-81); this document spells them
			// camelCase.
			msg += fmt.Sprintf(" (keys are camelCase here: %q)", c)
		} else if s := closest(k, allowed); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		d.errs.Add(path, "%s", msg)
	}
}

func (d decoder) object(path string, v any) (map[string]any, bool) {
	o, ok := v.(map[string]any)
	if !ok {
		d.errs.Add(path, "expected an object, got %s", yamldoc.TypeName(v))
	}
	return o, ok
}

func (d decoder) list(path string, v any) []any {
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		d.errs.Add(path, "expected a list, got %s", yamldoc.TypeName(v))
	}
	return l
}

func (d decoder) str(path string, v any) string {
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		d.errs.Add(path, "expected a string, got %s", yamldoc.TypeName(v))
	}
	return s
}

func (d decoder) float(path string, v any) *float64 {
	n, ok := v.(json.Number)
	if !ok {
		d.errs.Add(path, "expected a number, got %s", yamldoc.TypeName(v))
		return nil
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		d.errs.Add(path, "invalid number %s", n)
		return nil
	}
	return &f
}

func (d decoder) int(path string, v any) *int {
	n, ok := v.(json.Number)
	if !ok {
		d.errs.Add(path, "expected an integer, got %s", yamldoc.TypeName(v))
		return nil
	}
	i, err := n.Int64()
	if err != nil || i > math.MaxInt32 || i < math.MinInt32 {
		d.errs.Add(path, "expected an integer, got %s", n)
		return nil
	}
	out := int(i)
	return &out
}

func (d decoder) dataLayer(path string, v any) *DataLayerConfig {
	dl := &DataLayerConfig{Sources: []DataLayerSource{}}
	if v == nil {
		return dl
	}
	o, ok := d.object(path, v)
	if !ok {
		return dl
	}
	d.keys(path, o, "sources")
	for i, s := range d.list(field(path, "sources"), o["sources"]) {
		spath := index(field(path, "sources"), i)
		so, ok := d.object(spath, s)
		if !ok {
			continue
		}
		d.keys(spath, so, "pluginRef", "extractors")
		src := DataLayerSource{PluginRef: d.str(field(spath, "pluginRef"), so["pluginRef"])}
		for j, e := range d.list(field(spath, "extractors"), so["extractors"]) {
			epath := index(field(spath, "extractors"), j)
			eo, ok := d.object(epath, e)
			if !ok {
				continue
			}
			d.keys(epath, eo, "pluginRef")
			src.Extractors = append(src.Extractors, DataLayerExtractor{PluginRef: d.str(field(epath, "pluginRef"), eo["pluginRef"])})
		}
		dl.Sources = append(dl.Sources, src)
	}
	return dl
}

// quantity accepts a Kubernetes quantity written as a string or a number.
func (d decoder) quantity(path string, v any) string {
	switch q := v.(type) {
	case nil:
		return ""
	case string:
		return q
	case json.Number:
		return q.String()
	}
	d.errs.Add(path, "expected a quantity such as \"10Gi\" or 500, got %s", yamldoc.TypeName(v))
	return ""
}

func (d decoder) band(path string, v any) PriorityBandConfig {
	var b PriorityBandConfig
	o, ok := d.object(path, v)
	if !ok {
		return b
	}
	d.keys(path, o, "priority", "maxBytes", "maxRequests", "fairnessPolicyRef", "orderingPolicyRef")
	if p, ok := o["priority"]; ok && p != nil {
		if i := d.int(field(path, "priority"), p); i != nil {
			b.Priority = *i
		}
	}
	b.MaxBytes = d.quantity(field(path, "maxBytes"), o["maxBytes"])
	b.MaxRequests = d.quantity(field(path, "maxRequests"), o["maxRequests"])
	b.FairnessPolicyRef = d.str(field(path, "fairnessPolicyRef"), o["fairnessPolicyRef"])
	b.OrderingPolicyRef = d.str(field(path, "orderingPolicyRef"), o["orderingPolicyRef"])
	return b
}

func (d decoder) flowControl(path string, v any) *FlowControlConfig {
	o, ok := d.object(path, v)
	if !ok {
		return nil
	}
	d.keys(path, o, "maxBytes", "maxRequests", "defaultRequestTTL", "noEndpointRequestTTL", "defaultPriorityBand", "defaultNegativePriorityBand", "priorityBands", "usageLimitPolicyPluginRef")
	fc := &FlowControlConfig{
		MaxBytes:                  d.quantity(field(path, "maxBytes"), o["maxBytes"]),
		MaxRequests:               d.quantity(field(path, "maxRequests"), o["maxRequests"]),
		DefaultRequestTTL:         d.str(field(path, "defaultRequestTTL"), o["defaultRequestTTL"]),
		NoEndpointRequestTTL:      d.str(field(path, "noEndpointRequestTTL"), o["noEndpointRequestTTL"]),
		UsageLimitPolicyPluginRef: d.str(field(path, "usageLimitPolicyPluginRef"), o["usageLimitPolicyPluginRef"]),
	}
	if b, ok := o["defaultPriorityBand"]; ok && b != nil {
		band := d.band(field(path, "defaultPriorityBand"), b)
		fc.DefaultPriorityBand = &band
	}
	if b, ok := o["defaultNegativePriorityBand"]; ok && b != nil {
		band := d.band(field(path, "defaultNegativePriorityBand"), b)
		fc.DefaultNegativePriorityBand = &band
	}
	for i, b := range d.list(field(path, "priorityBands"), o["priorityBands"]) {
		fc.PriorityBands = append(fc.PriorityBands, d.band(index(field(path, "priorityBands"), i), b))
	}
	return fc
}

// closest returns the candidate nearest to s when it is a plausible typo.
// snakeToCamel spells a snake_case key camelCase (full_after_ms:
// fullAfterMs); a key without an underscore comes back unchanged.
func snakeToCamel(k string) string {
	if !strings.Contains(k, "_") {
		return k
	}
	var b strings.Builder
	up := false
	for i, r := range k {
		switch {
		case r == '_':
			up = i > 0
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func closest(s string, candidates []string) string {
	if c := scheduling.Closest(s, candidates, 1); len(c) > 0 {
		return c[0]
	}
	return ""
}
