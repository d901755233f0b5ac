// Package openai provides the openai-parser plugin, which selects the
// OpenAI-compatible request-body format for a pool (parser.pluginRef). It
// is the default parser, as in GIE v1.5.
//
// The plugin only names the format; the server's request parser does the
// work: it reads the API from the request path suffix (/chat/completions,
// /completions, /responses, /conversations, /embeddings), extracts the
// model and the prompt, and reads token usage from JSON or SSE responses.
package openai

import "github.com/switchyard-ai/switchyard/pkg/scheduling"

// Type is the plugin type name used in configuration.
const Type = "openai-parser"

// Format is the body format this parser selects.
const Format = "openai"

// Params is empty: the parser takes no parameters, and any key given is an
// error.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) parameters.
func DefaultParams() Params { return Params{} }

// Parser is a openai-parser instance. It is immutable.
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

// Registration registers the openai-parser type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Parser = (*Parser)(nil)
