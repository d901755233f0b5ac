package config

import (
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/fielderr"
)

// FieldError is one problem in a configuration, with the path of the field
// it concerns (e.g. `schedulingProfiles[0].plugins[2].pluginRef`).
type FieldError = fielderr.FieldError

// ValidationError lists every problem found in a configuration; its
// message starts with "invalid EndpointPickerConfig: ".
type ValidationError = fielderr.ValidationError[configSubject]

// configSubject names configuration errors.
type configSubject struct{}

// Subject implements fielderr.Subject.
func (configSubject) Subject() string { return "EndpointPickerConfig" }

// errorList collects field errors.
type errorList = fielderr.List[configSubject]

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
