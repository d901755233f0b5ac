package config

import (
	"fmt"
	"strings"
)

// FieldError is one problem in a configuration, with the path of the field
// it concerns (e.g. `schedulingProfiles[0].plugins[2].pluginRef`).
type FieldError struct {
	Path string
	Msg  string
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// ValidationError lists every problem found in a configuration.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	if len(e.Errors) == 1 {
		return "invalid EndpointPickerConfig: " + e.Errors[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid EndpointPickerConfig: %d errors:", len(e.Errors))
	for _, fe := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// errorList collects field errors.
type errorList struct{ errs []FieldError }

func (l *errorList) add(path, format string, args ...any) {
	l.errs = append(l.errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: l.errs}
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
