package requests

import "errors"

// Error is a client error in a request body: the request should be
// refused with HTTP 400. Field is a JSON path into the body, such as
// "model" or "messages[2].content[0].text", or "" when the body as a whole
// is wrong; Message says what is wrong with it.
type Error struct {
	Field   string
	Message string
}

// Error returns "Field: Message", or Message alone when Field is empty.
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// ErrUnknownFormat is returned by Parse for a format it does not know. It
// is a configuration error, not a client error, and is not an *Error.
var ErrUnknownFormat = errors.New("requests: unknown body format")

// Error messages shared by several fields.
const (
	msgRequired = "is required"
	msgString   = "must be a string"
	msgBool     = "must be a boolean"
	msgObject   = "must be an object"
	msgArray    = "must be an array"
)
