package registry

// Info describes a registry at one moment, for introspection (the
// observer shows it).
type Info struct {
	Kind       Kind
	Partitions int
	Running    bool
	Entries    int   // entries in all partitions
	Keys       []int // distinct keys held in each partition
	Processes  int   // processes the registry watches (registered and not exited)
}

// Info returns the registry's sizes. It reads one partition at a time,
// so a registry that changes meanwhile may be counted between two states;
// it costs O(partitions) for a duplicate registry and O(entries) for a
// unique one (it counts the keys of each partition's tables).
func (r *Registry[K, V]) Info() Info {
	in := Info{Kind: r.kind, Partitions: r.nparts, Keys: make([]int, r.nparts)}
	t := r.live()
	if t == nil {
		return in
	}
	in.Running = true
	for i := range t.parts {
		pt := &t.parts[i]
		pt.mu.RLock()
		in.Processes += len(pt.owners)
		if r.kind == Duplicate {
			in.Entries += int(pt.count.Load())
			in.Keys[i] = len(pt.dup)
		}
		pt.mu.RUnlock()
		if r.kind == Unique {
			pt.u.each(func(*uslot[K, V]) { in.Keys[i]++ })
			in.Entries += in.Keys[i] // one entry per key
		}
	}
	return in
}
