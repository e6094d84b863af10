package httpguard

import (
	"fmt"

	"github.com/guardkit/guardkit/guard"
)

// ConfigError reports an invalid LockConfig, naming the field. It matches
// guard.ErrInvalidConfig, so one errors.Is test covers every guardkit entry point.
type ConfigError struct {
	// Field is the LockConfig field, such as "Key" or "TTL".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, when there is one: the key template's
	// *keyfunc.SyntaxError or *keyfunc.BindError, or guard's *guard.ConfigError.
	Err error
}

// Error names the field and says what is wrong with it.
func (e *ConfigError) Error() string {
	return "httpguard: invalid configuration: " + e.Field + ": " + e.Reason
}

// Unwrap returns guard.ErrInvalidConfig, then the underlying error when there is one,
// for errors.Is and errors.As.
func (e *ConfigError) Unwrap() []error {
	if e.Err == nil {
		return []error{guard.ErrInvalidConfig}
	}
	return []error{guard.ErrInvalidConfig, e.Err}
}

// Error is an error with the HTTP status and the text a client should get. An
// Extractor that returns one (such as &httpguard.Error{Code: 401, Text: "sign in
// first"}) has the default ErrorHandler answer with it instead of 400.
type Error struct {
	// Code is the HTTP status code.
	Code int
	// Text is what the client reads.
	Text string
	// Err is the cause, for logs; never shown to the client.
	Err error
}

// Error returns the status and text, and the cause when there is one.
func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("httpguard: %d %s", e.Code, e.Text)
	}
	return fmt.Sprintf("httpguard: %d %s: %v", e.Code, e.Text, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// noParamError reports a key that names a path value the matched route does not have: a
// mistake in the route or the template, or a middleware placed around the router (whose
// requests carry no path values yet) instead of around the route's handler.
type noParamError struct {
	route, name string
}

func (e *noParamError) Error() string {
	if e.route == "" {
		return fmt.Sprintf("httpguard: the request has no path value %q and no route pattern: "+
			"wrap the route's handler (mux.Handle(pattern, lock(h))), not the router", e.name)
	}
	return fmt.Sprintf("httpguard: route %q has no path value %q", e.route, e.name)
}
