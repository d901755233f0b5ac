package fielderr

import (
	"fmt"
	"strings"
)

// FieldError is one problem, with the path of the field it concerns, e.g.
// `endpoints[2].port` or `schedulingProfiles[0].plugins[2].pluginRef`.
type FieldError struct {
	// Path names the field; empty for problems of a whole document.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error returns "path: msg", or msg alone when the path is empty.
func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Subject names what a ValidationError is about; it is implemented by a
// zero-size type of the package reporting the error.
type Subject interface {
	// Subject returns the name used in "invalid <subject>: ...", e.g.
	// "endpoints".
	Subject() string
}

// ValidationError lists every problem found in one document about S.
type ValidationError[S Subject] struct {
	Errors []FieldError
}

// Error returns "invalid <subject>: <problem>" for one problem, and
// "invalid <subject>: <n> errors:" followed by one indented line per
// problem otherwise.
func (e *ValidationError[S]) Error() string {
	var s S
	prefix := "invalid " + s.Subject() + ": "
	if len(e.Errors) == 1 {
		return prefix + e.Errors[0].Error()
	}
	var b strings.Builder
	b.WriteString(prefix)
	fmt.Fprintf(&b, "%d errors:", len(e.Errors))
	for _, fe := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// List collects the problems of a document about S; its zero value is
// ready to use.
type List[S Subject] struct{ errs []FieldError }

// Add records a problem at path, its message formatted as by fmt.Sprintf.
func (l *List[S]) Add(path, format string, args ...any) {
	l.errs = append(l.errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Len returns the number of problems recorded.
func (l *List[S]) Len() int { return len(l.errs) }

// Err returns a *ValidationError[S] with a copy of every problem recorded,
// or nil when there is none.
func (l *List[S]) Err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return &ValidationError[S]{Errors: append([]FieldError(nil), l.errs...)}
}
