package gotp

import "errors"

// Register registers pid under a local name. It fails with
// *AlreadyRegisteredError if the name is taken, with ErrNoProc if pid is not
// a live process of this node, and with ErrAlreadyNamed if the process
// already has a name. The name is freed when the process exits.
func (n *Node) Register(name string, pid PID) error {
	p := n.lookup(pid)
	if p == nil {
		return ErrNoProc
	}
	return n.register(name, p)
}

// ErrAlreadyNamed is returned when registering a process that already has
// a local name.
var ErrAlreadyNamed = errors.New("gotp: process already has a name")

// ErrEmptyName is returned when registering the empty name.
var ErrEmptyName = errors.New("gotp: empty name")

func (n *Node) register(name string, p *Process) error {
	if name == "" {
		return ErrEmptyName
	}
	n.namesMu.Lock()
	defer n.namesMu.Unlock()
	if q, ok := n.names[name]; ok {
		return &AlreadyRegisteredError{Name: name, Owner: q.Self()}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead.Load() {
		return ErrNoProc
	}
	if p.name != "" {
		return ErrAlreadyNamed
	}
	p.name = name
	n.names[name] = p
	return nil
}

// Unregister frees a local name. It reports whether the name was
// registered.
func (n *Node) Unregister(name string) bool {
	n.namesMu.Lock()
	p, ok := n.names[name]
	delete(n.names, name)
	n.namesMu.Unlock()
	if ok {
		p.mu.Lock()
		if p.name == name {
			p.name = ""
		}
		p.mu.Unlock()
	}
	return ok
}

// unregisterProcName frees name if p still holds it.
func (n *Node) unregisterProcName(name string, p *Process) {
	n.namesMu.Lock()
	if n.names[name] == p {
		delete(n.names, name)
	}
	n.namesMu.Unlock()
}

// Whereis returns the process registered under a local name.
func (n *Node) Whereis(name string) (PID, bool) {
	n.namesMu.RLock()
	p, ok := n.names[name]
	n.namesMu.RUnlock()
	if !ok {
		return PID{}, false
	}
	return p.Self(), true
}

// Registered returns every registered local name.
func (n *Node) Registered() []string {
	n.namesMu.RLock()
	defer n.namesMu.RUnlock()
	out := make([]string, 0, len(n.names))
	for name := range n.names {
		out = append(out, name)
	}
	return out
}

// A Dest is anything a message can be addressed to: a PID, a local Name,
// or a name held by a name service (see Via).
type Dest interface {
	// Resolve returns the process the destination names on node n now.
	Resolve(n *Node) (PID, bool)
}

// Resolve returns p itself; it reports false for the zero PID.
func (p PID) Resolve(*Node) (PID, bool) { return p, !p.IsZero() }

// Name is a local process name, usable as a Dest.
type Name string

// Resolve looks the name up with Whereis.
func (nm Name) Resolve(n *Node) (PID, bool) { return n.Whereis(string(nm)) }

// Via is a name held by a name service other than the node's local names,
// such as a unique registry (Erlang's {via, Module, Name}). Behaviours that
// start named processes register them through it.
type Via interface {
	Dest
	// RegisterName registers pid under the name. It must fail with
	// *AlreadyRegisteredError naming the holder if the name is taken, and
	// must free the name when pid exits.
	RegisterName(n *Node, pid PID) error
	// UnregisterName frees the name.
	UnregisterName(n *Node)
}
