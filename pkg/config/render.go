package config

import (
	"bytes"
	"encoding/json"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

// MarshalYAML renders a configuration as YAML with its keys in schema order
// (apiVersion, kind, featureGates, plugins, ...; plugin parameters in their
// declaration order), the way people write these files, rather than the
// alphabetical order of a map.
func MarshalYAML(cfg *EndpointPickerConfig) ([]byte, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// JSON is YAML: decoding it into a node keeps the key order.
	var doc yaml.Node
	if err := yaml.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("render configuration: %w", err)
	}
	plainStyle(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("render configuration: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// plainStyle drops the JSON flow style and quoting so that the output reads
// as block YAML; the encoder still quotes strings that need it.
func plainStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plainStyle(c)
	}
}
