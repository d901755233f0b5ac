package yamldoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
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
	// MaxExpandedBytes, when > 0, bounds the size of the document once
	// its YAML aliases are expanded (see ExpandedSize). It is checked
	// before anything expands them, so a small document cannot make the
	// decoder build an enormous one ("billion laughs").
	MaxExpandedBytes int64
}

// Decode returns the root value of data (numbers as json.Number, objects
// as map[string]any), or a problem of the whole document saying what is
// wrong; root is nil when problem is not "".
func Decode(data []byte, r Rules) (root any, problem string) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, r.Empty
	}
	if r.MaxExpandedBytes > 0 {
		if n := ExpandedSize(data, r.MaxExpandedBytes); n > r.MaxExpandedBytes {
			return nil, fmt.Sprintf("the document is more than %d bytes once its YAML aliases are expanded (the limit is %d bytes)", r.MaxExpandedBytes, r.MaxExpandedBytes)
		}
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

// ExpandedSize estimates the size in bytes of data once the YAML aliases
// of its documents are expanded: len(data) plus, for every alias, the size
// of what it stands for (its scalars' lengths plus a little per node, as
// in JSON), following aliases within aliases. Counting stops once the
// total passes limit, so the result is at most limit+1 for any document
// larger; the document is parsed once and nothing is expanded. A document
// without aliases, or one that does not parse (the decoder then reports
// the syntax error), counts as len(data).
func ExpandedSize(data []byte, limit int64) int64 {
	total := int64(len(data))
	if total > limit {
		return limit + 1
	}
	if !bytes.ContainsRune(data, '*') {
		return total // no alias
	}
	e := expansion{limit: limit, size: map[*yamlv3.Node]int64{}}
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	for total <= limit {
		var doc yamlv3.Node
		if err := dec.Decode(&doc); err != nil {
			break // io.EOF, or a syntax error reported later
		}
		total = e.add(total, e.aliased(&doc))
	}
	return min(total, limit+1)
}

// expansion measures alias expansions with a memo per node.
type expansion struct {
	limit int64
	size  map[*yamlv3.Node]int64 // -1 while being measured
}

// add returns a+b, saturated just above the limit.
func (e *expansion) add(a, b int64) int64 {
	if a > e.limit || b > e.limit || a+b > e.limit {
		return e.limit + 1
	}
	return a + b
}

// aliased returns what the aliases in n add to the document.
func (e *expansion) aliased(n *yamlv3.Node) int64 {
	if n.Kind == yamlv3.AliasNode {
		return e.expanded(n.Alias)
	}
	var extra int64
	for _, c := range n.Content {
		if extra = e.add(extra, e.aliased(c)); extra > e.limit {
			break
		}
	}
	return extra
}

// expanded returns the size of n with its aliases expanded. An alias of
// a node that contains it (the decoder refuses those) counts as nothing.
func (e *expansion) expanded(n *yamlv3.Node) int64 {
	if n == nil {
		return 0
	}
	if n.Kind == yamlv3.AliasNode {
		return e.expanded(n.Alias)
	}
	if s, ok := e.size[n]; ok {
		return max(s, 0)
	}
	e.size[n] = -1
	s := int64(len(n.Value)) + 2 // quotes, or brackets, and a separator
	for _, c := range n.Content {
		if s = e.add(s, e.expanded(c)); s > e.limit {
			break
		}
	}
	e.size[n] = s
	return s
}
