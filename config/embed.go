// Package configfiles embeds the configuration files shipped in config/:
// the default EndpointPickerConfig and the samples. The YAML files are the
// source; this file only makes them available to the binary and to tests.
package configfiles

import "embed"

// Default is config/default.yaml, used when no configuration is given.
//
//go:embed default.yaml
var Default []byte

// Samples holds config/samples/*.yaml.
//
//go:embed samples/*.yaml
var Samples embed.FS
