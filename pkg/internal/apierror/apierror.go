package apierror

import "encoding/json"

// Code is the type of an error body's code: an HTTP status or a reason.
type Code interface{ ~int | ~string }

// Envelope is the OpenAI-style error body.
type Envelope[C Code] struct {
	Error Detail[C] `json:"error"`
}

// Detail is the content of an Envelope; Param is always null here.
type Detail[C Code] struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    C       `json:"code"`
}

// JSON returns the encoded Envelope for message, typ and code, as
// encoding/json writes it (HTML characters escaped as \u003c and so on).
func JSON[C Code](message, typ string, code C) []byte {
	// Marshal cannot fail for strings and integers.
	b, _ := json.Marshal(Envelope[C]{Error: Detail[C]{Message: message, Type: typ, Code: code}})
	return b
}
