// Package fielderr holds the error types that configuration and endpoint
// decoders report with: a FieldError names one problem and the path of the
// field it concerns, a ValidationError lists every problem found in one
// document, and a List collects them while a decoder walks the document.
//
// The subject of a ValidationError (what is invalid, as in "invalid
// endpoints: ...") is a type parameter, so the errors of different
// documents stay distinct types for errors.As. A package names its own
// subject with a small unexported type and exports aliases, e.g.
//
//	type endpoints struct{}
//	func (endpoints) Subject() string { return "endpoints" }
//	type ValidationError = fielderr.ValidationError[endpoints]
//
// # Who imports it
//
// pkg/config and pkg/datastore (and through their aliases, their callers),
// pkg/modelsim and bench/quality.
// It imports only the standard library.
package fielderr
