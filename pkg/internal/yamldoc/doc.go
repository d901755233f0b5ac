// Package yamldoc holds the first steps every YAML (or JSON) document
// decoder of the project takes before it walks the document: refuse an
// empty document, optionally refuse one whose YAML aliases would expand it
// past a size (ExpandedSize, measured without expanding anything), run the
// caller's own document check (such as "exactly one document"), convert
// YAML to JSON, and decode the JSON with numbers kept as json.Number. Message turns a YAML library error into one line,
// TypeName names a decoded value's kind in messages, and UnknownKeys lists
// the keys of an object that its schema does not allow.
//
// # Who imports it
//
// pkg/config (EndpointPickerConfig files) and pkg/datastore/endpointsfile
// (endpoints files). It imports sigs.k8s.io/yaml, go.yaml.in/yaml/v3 and
// the standard library.
package yamldoc
