package registry

import (
	"fmt"

	"github.com/gotp/gotp"
)

// Via is a name held by a unique registry: a gotp.Via, usable wherever a
// gotp.Dest is (Node.SendTo, server.Call, server.Cast) and to name a
// process at its start (server.WithVia), like Elixir's
// {:via, Registry, {registry, key}}. Get one from Registry.Via.
type Via[K comparable, V any] struct {
	r     *Registry[K, V]
	key   K
	value V
}

// Via returns the name key in r, registered with the zero value.
func (r *Registry[K, V]) Via(key K) Via[K, V] { return Via[K, V]{r: r, key: key} }

// ViaValue returns the name key in r, registered with value (Elixir's
// {:via, Registry, {registry, key, value}}).
func (r *Registry[K, V]) ViaValue(key K, value V) Via[K, V] {
	return Via[K, V]{r: r, key: key, value: value}
}

// Key returns the name's key.
func (v Via[K, V]) Key() K { return v.key }

// Resolve returns the process holding the name, if any. A holder that
// has exited but whose entry is not cleaned up yet (see the package
// documentation) holds nothing: the name resolves to no process, so that
// server.Call fails with gotp.ErrNoProc at once instead of calling a dead
// PID, and Node.SendTo reports false.
func (v Via[K, V]) Resolve(*gotp.Node) (gotp.PID, bool) {
	if v.r == nil || v.r.kind != Unique {
		return gotp.PID{}, false
	}
	e, ok := v.r.Find(v.key)
	if !ok || !v.r.n.IsAlive(e.PID) {
		return gotp.PID{}, false
	}
	return e.PID, true
}

// RegisterName registers pid under the name, as Register would for pid
// itself. It fails with *gotp.AlreadyRegisteredError naming the holder
// when the name is taken (so that server.Start returns
// *server.AlreadyStartedError), with ErrNotUnique on a duplicate registry,
// and otherwise as Register. The name is freed when pid exits.
func (v Via[K, V]) RegisterName(n *gotp.Node, pid gotp.PID) error {
	if v.r == nil {
		return ErrNotRunning
	}
	if v.r.kind != Unique {
		return ErrNotUnique
	}
	if n != nil && n != v.r.n {
		return fmt.Errorf("registry: via name of another node's registry: %w", gotp.ErrNoProc)
	}
	err := v.r.register(nil, pid, v.key, v.value)
	if e, ok := err.(*AlreadyRegisteredError); ok {
		return &gotp.AlreadyRegisteredError{Name: fmt.Sprint(v.key), Owner: e.Owner}
	}
	return err
}

// UnregisterName frees the name, whoever holds it.
func (v Via[K, V]) UnregisterName(*gotp.Node) {
	if v.r != nil {
		v.r.unregisterKey(v.key)
	}
}

// String returns a readable form of the name.
func (v Via[K, V]) String() string {
	if v.r == nil {
		return fmt.Sprintf("via(<nil>, %v)", v.key)
	}
	return fmt.Sprintf("via(%v, %v)", v.r.PID(), v.key)
}

var _ gotp.Via = Via[string, int]{}
