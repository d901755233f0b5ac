// Package config loads EndpointPickerConfig files, the configuration format
// of the GIE v1.5 and llm-d endpoint pickers, so that their existing files
// load unchanged.
//
// # Loading
//
// Load decodes a YAML or JSON document strictly (an unknown key is an
// error), instantiates every plugin through the registry, applies GIE's
// defaulting rules (instance names, a default profile, the single profile
// handler, a max-score picker, scorer weight 1, the openai parser, the
// utilization saturation detector, the metrics data layer, and producers the
// configured consumers need), validates cross references, and builds the
// scheduler. It reports every problem at once, each with its field path, as
// a *ValidationError.
//
// # Who imports it
//
// cmd/epp and the server. It imports pkg/scheduling and takes the plugin
// registry as an argument, so it never imports a plugin.
package config
