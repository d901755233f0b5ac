package datastore

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/internal/suggest"
	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Keys of a model declaration and of its pricing, as the endpoints file
// and the switchyard.ai/models pod annotation write them.
var (
	modelFields   = []string{"name", "aliases", "pricing"}
	pricingFields = []string{"input", "output"}
)

// MaxModelsBytes bounds a model list given as a document of its own (the
// switchyard.ai/models pod annotation): Kubernetes bounds all of a pod's
// annotations to 256 KiB together.
const MaxModelsBytes = 256 << 10

// DecodeModels decodes a list of model declarations from a document tree
// as package yamldoc returns it (objects as map[string]any, numbers as
// json.Number), strictly: every entry is an object with a name and
// optionally aliases (a list of strings) and pricing ({input, output},
// numbers in USD per 1M tokens, both required; pricing: {} and pricing:
// null mark the entry Unpriced); an unknown key (with a "did you mean"
// hint) or a value of the wrong type is reported at its path under path
// (`endpoints[0].models[1].pricing.input`). null is an empty list. It does
// not run CheckModels (the spec's validation does); bad reports whether
// any problem was a decoding one.
func DecodeModels(errs *ErrorList, path string, v any) (models []scheduling.ModelEntry, bad bool) {
	if v == nil {
		return nil, false
	}
	list, ok := v.([]any)
	if !ok {
		errs.Add(path, "expected a list of models ({name, aliases, pricing}), got %s", yamldoc.TypeName(v))
		return nil, true
	}
	if len(list) > MaxModels {
		errs.Add(path, "%d models exceed the limit of %d", len(list), MaxModels)
		return nil, true
	}
	before := errs.Len()
	models = make([]scheduling.ModelEntry, len(list))
	for i, item := range list {
		decodeModel(errs, path+"["+strconv.Itoa(i)+"]", item, &models[i])
	}
	return models, errs.Len() > before
}

func decodeModel(errs *ErrorList, path string, v any, m *scheduling.ModelEntry) {
	obj, ok := v.(map[string]any)
	if !ok {
		errs.Add(path, "expected an object with a name, got %s", yamldoc.TypeName(v))
		return
	}
	unknownKeys(errs, path, obj, modelFields)
	switch n, present := obj["name"]; {
	case !present || n == nil:
		errs.Add(path+".name", "required")
	default:
		s, ok := n.(string)
		if !ok {
			errs.Add(path+".name", "expected a string, got %s", yamldoc.TypeName(n))
		}
		m.Name = s
	}
	if raw, ok := obj["aliases"]; ok && raw != nil {
		list, ok := raw.([]any)
		switch {
		case !ok:
			errs.Add(path+".aliases", "expected a list of strings, got %s", yamldoc.TypeName(raw))
		case len(list) > MaxAliases:
			errs.Add(path+".aliases", "%d aliases exceed the limit of %d", len(list), MaxAliases)
		default:
			m.Aliases = make([]string, 0, len(list))
			for j, a := range list {
				s, ok := a.(string)
				if !ok {
					errs.Add(path+".aliases["+strconv.Itoa(j)+"]", "expected a string, got %s", yamldoc.TypeName(a))
					continue
				}
				m.Aliases = append(m.Aliases, s)
			}
		}
	}
	if raw, ok := obj["pricing"]; ok && raw == nil {
		m.Unpriced = true // pricing: null shadows a catalog price
	} else if ok {
		po, ok := raw.(map[string]any)
		if !ok {
			errs.Add(path+".pricing", "expected an object {input, output} in USD per 1M tokens, got %s", yamldoc.TypeName(raw))
			return
		}
		unknownKeys(errs, path+".pricing", po, pricingFields)
		hasIn, hasOut := po["input"] != nil, po["output"] != nil
		if !hasIn && !hasOut {
			m.Unpriced = true // pricing: {} is pricing: null
			return
		}
		p := &scheduling.Price{}
		price(errs, path+".pricing.input", po, "input", &p.Input)
		price(errs, path+".pricing.output", po, "output", &p.Output)
		for _, k := range pricingFields {
			if po[k] == nil {
				errs.Add(path+".pricing."+k, "required: a pricing gives both input and output (pricing: {} or null for no price)")
			}
		}
		m.Pricing = p
	}
}

// price decodes a number (absent or null leaves dst alone; decodeModel
// reports a missing one).
func price(errs *ErrorList, path string, obj map[string]any, key string, dst *float64) {
	v, ok := obj[key]
	if !ok || v == nil {
		return
	}
	n, ok := v.(json.Number)
	if !ok {
		errs.Add(path, "expected a number (USD per 1M tokens), got %s", yamldoc.TypeName(v))
		return
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) {
		errs.Add(path, "%s is not a finite number", n)
		return
	}
	*dst = f
}

// unknownKeys reports the keys of obj not in allowed, with a hint.
func unknownKeys(errs *ErrorList, path string, obj map[string]any, allowed []string) {
	for _, k := range yamldoc.UnknownKeys(obj, allowed) {
		msg := fmt.Sprintf("unknown field %q", k)
		if s := closestKey(k, allowed); s != "" {
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
	if !plain {
		return path + "[" + strconv.Quote(k) + "]"
	}
	return join(path, k)
}

func closestKey(s string, candidates []string) string {
	if len(s) > 64 {
		return ""
	}
	best, bestD := "", 3
	for _, c := range candidates {
		if d := suggest.Distance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// ParseModels decodes and validates a model list given as a document of
// its own, YAML or JSON (the switchyard.ai/models pod annotation), with
// the same rules as an endpoints file's models (DecodeModels, then
// CheckModels). Problems are reported at once as a *ValidationError with
// paths under path.
func ParseModels(data []byte, path string) ([]scheduling.ModelEntry, error) {
	var errs ErrorList
	if len(data) > MaxModelsBytes {
		errs.Add(path, "%d bytes exceed the limit of %d", len(data), MaxModelsBytes)
		return nil, errs.Err()
	}
	root, problem := yamldoc.Decode(data, yamldoc.Rules{
		Empty:            "empty; write [] to declare no model, or leave it out",
		Strict:           true,
		NotDecoded:       "not valid YAML or JSON",
		MaxExpandedBytes: MaxModelsBytes,
	})
	if problem != "" {
		errs.Add(path, "%s", problem)
		return nil, errs.Err()
	}
	models, bad := DecodeModels(&errs, path, root)
	if !bad {
		CheckModels(&errs, path, models)
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return slices.Clip(models), nil
}
