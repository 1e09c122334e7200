package server

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"

	"github.com/gotp/gotp"
)

// The sys-style questions a server answers between callbacks, through its
// own mailbox (OTP's sys:get_state and sys:replace_state).
type (
	sysGetState     struct{ a *answer }
	sysReplaceState struct {
		a  *answer
		fn func(Behaviour) (Behaviour, error)
	}
	// stateReply carries a state as an answer, so that a behaviour that
	// happens to be an error is not taken for one.
	stateReply struct{ b Behaviour }
)

// ErrBadState is wrapped by ReplaceState's error when its function
// panicked or returned a value that is not a Behaviour: the server's
// state is then unchanged.
var ErrBadState = errors.New("server: state function failed")

// GetState returns the state of the server to on node n: the Behaviour it
// runs, read as the server between two callbacks, after the messages
// queued before the question (OTP's sys:get_state). S is the type the
// caller expects, usually the behaviour's pointer type: the result is then
// the server's own value, which its callbacks go on changing after
// GetState returns, so read its fields only while the server cannot run
// (a test that sends it nothing else), or copy them inside ReplaceState's
// function, which runs as the server. It fails with *ReplyTypeError when
// the state is not an S, with ErrNotServer for a process that is not a
// server, and with *CallError as Call does (ctx bounds the wait, or
// DefaultCallTimeout). Only servers on n can be asked.
func GetState[S any](ctx context.Context, n *gotp.Node, to gotp.Dest) (S, error) {
	var zero S
	v, err := ask(ctx, n, to, func(a *answer) any { return sysGetState{a: a} })
	if err != nil {
		return zero, err
	}
	b := v.(stateReply).b
	s, ok := any(b).(S)
	if !ok {
		return zero, &ReplyTypeError{Reply: b, Want: typeName[S]()}
	}
	return s, nil
}

// ReplaceState runs fn as the server to on node n, between two callbacks,
// with the server's state (its Behaviour, as an S), and makes what fn
// returns the server's state from then on (OTP's sys:replace_state). It
// returns the new state. fn may change the state it is given and return
// it, or return another value; either way it runs as the server, so it
// may read and write the behaviour's fields freely, and the callbacks
// that follow see what it did. If fn panics or returns a value that is not
// a non-nil Behaviour, the state is unchanged and ReplaceState fails with
// an error wrapping ErrBadState (and the *gotp.PanicError, if fn
// panicked); the server goes on. Other failures are those of GetState.
func ReplaceState[S any](ctx context.Context, n *gotp.Node, to gotp.Dest, fn func(S) S) (S, error) {
	var zero S
	replace := func(b Behaviour) (Behaviour, error) {
		s, ok := any(b).(S)
		if !ok {
			return nil, &ReplyTypeError{Reply: b, Want: typeName[S]()}
		}
		nb, ok := any(fn(s)).(Behaviour)
		if !ok || isNil(nb) {
			return nil, fmt.Errorf("%w: it returned a %s, not a Behaviour", ErrBadState, typeName[S]())
		}
		return nb, nil
	}
	v, err := ask(ctx, n, to, func(a *answer) any { return sysReplaceState{a: a, fn: replace} })
	if err != nil {
		return zero, err
	}
	switch r := v.(type) {
	case error:
		return zero, r
	case stateReply:
		s, _ := any(r.b).(S)
		return s, nil
	}
	return zero, nil
}

// replaceState runs fn on the server's state, as the server, and returns
// the new state (a stateReply) or why the state is unchanged (an error).
func (g *gen) replaceState(fn func(Behaviour) (Behaviour, error)) (answer any) {
	defer func() {
		if v := recover(); v != nil {
			answer = fmt.Errorf("%w: %w", ErrBadState, &gotp.PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	nb, err := fn(g.b)
	if err != nil {
		return err
	}
	g.b = nb
	return stateReply{nb}
}

func typeName[T any]() string { return fmt.Sprintf("%T", (*T)(nil))[1:] }

// isNil reports whether b is nil or holds a nil pointer, map, slice, func
// or channel: no state a server can run.
func isNil(b Behaviour) bool {
	if b == nil {
		return true
	}
	switch v := reflect.ValueOf(b); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}
