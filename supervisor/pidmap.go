package supervisor

import "github.com/gotp/gotp"

// pidMap maps the PIDs of running children to them. Children on the
// supervisor's own node (all of them, in practice) are keyed by their
// numeric id, which hashes far faster than a whole PID; others by PID.
type pidMap struct {
	node     string
	creation uint32
	local    map[uint64]*child
	remote   map[gotp.PID]*child
}

func newPIDMap(size int) pidMap {
	return pidMap{local: make(map[uint64]*child, size)}
}

func (m *pidMap) isLocal(pid gotp.PID) bool {
	return pid.Node() == m.node && pid.Creation() == m.creation
}

func (m *pidMap) get(pid gotp.PID) (*child, bool) {
	if m.isLocal(pid) {
		c, ok := m.local[pid.ID()]
		return c, ok
	}
	c, ok := m.remote[pid]
	return c, ok
}

func (m *pidMap) put(pid gotp.PID, c *child) {
	if m.isLocal(pid) {
		m.local[pid.ID()] = c
		return
	}
	if m.remote == nil {
		m.remote = make(map[gotp.PID]*child)
	}
	m.remote[pid] = c
}

func (m *pidMap) del(pid gotp.PID) {
	if m.isLocal(pid) {
		delete(m.local, pid.ID())
		return
	}
	delete(m.remote, pid)
}

func (m *pidMap) len() int { return len(m.local) + len(m.remote) }

// each calls f for every child, in no particular order.
func (m *pidMap) each(f func(*child)) {
	for _, c := range m.local {
		f(c)
	}
	for _, c := range m.remote {
		f(c)
	}
}

func (m *pidMap) clear() {
	clear(m.local)
	clear(m.remote)
}
