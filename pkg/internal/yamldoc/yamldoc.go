package yamldoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Rules are what differs between the kinds of document decoded.
type Rules struct {
	// Empty is the problem reported for a document that is blank, only
	// comments, or null.
	Empty string
	// Check, if not nil, looks at the raw document before it is converted
	// and returns a problem (e.g. a second YAML document), or "".
	Check func(data []byte) string
	// Strict converts with sigs.k8s.io/yaml.YAMLToJSONStrict, which
	// rejects a key given twice; otherwise the caller's Check is expected
	// to do so.
	Strict bool
	// NotDecoded starts the problem reported when the converted document
	// does not decode as JSON, e.g. "not valid JSON"; the decoder's error
	// follows after ": ".
	NotDecoded string
}

// Decode returns the root value of data (numbers as json.Number, objects
// as map[string]any), or a problem of the whole document saying what is
// wrong; root is nil when problem is not "".
func Decode(data []byte, r Rules) (root any, problem string) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, r.Empty
	}
	if r.Check != nil {
		if p := r.Check(data); p != "" {
			return nil, p
		}
	}
	convert := yaml.YAMLToJSON
	if r.Strict {
		convert = yaml.YAMLToJSONStrict
	}
	jsonData, err := convert(data)
	if err != nil {
		return nil, "not valid YAML: " + Message(err)
	}
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return nil, r.NotDecoded + ": " + err.Error()
	}
	if root == nil {
		return nil, r.Empty
	}
	return root, ""
}

// Message makes a YAML library error read as one line, without the
// library's prefixes; a NaN or infinite number gets a message of its own.
func Message(err error) string {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	for _, v := range []string{"NaN", "+Inf", "-Inf"} {
		if strings.Contains(msg, "unsupported value: "+v) {
			return "a number is .nan or .inf; every number must be finite"
		}
	}
	return msg
}

// TypeName names the kind of a decoded value in messages: "null", "a
// string", "a number", "a boolean", "a list" or "an object".
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// UnknownKeys returns the keys of obj that are not in allowed, sorted.
func UnknownKeys(obj map[string]any, allowed []string) []string {
	var unknown []string
	for k := range obj {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return unknown
}
