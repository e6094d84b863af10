package middleware

import "github.com/guardkit/guardkit/guard"

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
	return "middleware: invalid configuration: " + e.Field + ": " + e.Reason
}

// Unwrap returns guard.ErrInvalidConfig, then the underlying error when there is one,
// for errors.Is and errors.As (as guard's typed errors do).
func (e *ConfigError) Unwrap() []error {
	if e.Err == nil {
		return []error{guard.ErrInvalidConfig}
	}
	return []error{guard.ErrInvalidConfig, e.Err}
}
