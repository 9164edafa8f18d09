package singleflight

import (
	"errors"
	"fmt"
)

// ErrGoexit is returned to every caller when the shared function called
// runtime.Goexit (for example through t.FailNow) instead of returning.
var ErrGoexit = errors.New("singleflight: function called runtime.Goexit")

// PanicError is returned to every caller when the shared function panicked.
// It holds the panic value and the stack of the panicking goroutine.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the stack trace at the time of the panic.
	Stack []byte
}

// Error implements error. It includes the panic value and the stack.
func (p *PanicError) Error() string {
	return fmt.Sprintf("singleflight: function panicked: %v\n\n%s", p.Value, p.Stack)
}

// Unwrap returns the panic value when it is an error, so that errors.Is and
// errors.As see through the panic.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}
