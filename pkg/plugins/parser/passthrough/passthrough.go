// Package passthrough provides the passthrough-parser plugin, which
// selects the pass-through request-body format for a pool
// (parser.pluginRef), as in GIE v1.5.
//
// The plugin only names the format; the server forwards the body as raw
// bytes: it does not read a model name or a prompt from it and never
// rewrites it, so model rewrites, prefix-cache affinity and token estimates
// have nothing to work with; token usage is not read from responses.
package passthrough

import "github.com/switchyard-ai/switchyard/pkg/scheduling"

// Type is the plugin type name used in configuration.
const Type = "passthrough-parser"

// Format is the body format this parser selects.
const Format = "passthrough"

// Params is empty: the parser takes no parameters, and any key given is an
// error.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) parameters.
func DefaultParams() Params { return Params{} }

// Parser is a passthrough-parser instance. It is immutable.
type Parser struct {
	name string
}

// New builds the parser.
func New(name string, _ Params, _ scheduling.Handle) (*Parser, error) {
	return &Parser{name: name}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Parser) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: p.name}
}

// Format implements scheduling.Parser.
func (p *Parser) Format() string { return Format }

// Registration registers the passthrough-parser type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Parser = (*Parser)(nil)
