package registry

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gotp/gotp"
)

// Kind is the kind of a registry: Unique or Duplicate keys.
type Kind uint8

const (
	// Unique registries map a key to at most one process (the zero Kind).
	Unique Kind = iota
	// Duplicate registries map a key to any number of entries; one process
	// may register the same key many times.
	Duplicate
)

// String returns "unique" or "duplicate".
func (k Kind) String() string {
	switch k {
	case Unique:
		return "unique"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MaxPartitions is the largest number of partitions New accepts.
const MaxPartitions = 1 << 16

// Options configure a registry. The zero value is a unique registry with
// one partition, no listeners and no metadata.
type Options struct {
	// Kind is Unique (the default) or Duplicate.
	Kind Kind

	// Partitions is the number of partitions; 0 means 1. A unique registry
	// puts a key in the partition its hash selects; a duplicate registry
	// puts every entry of a process in the partition of that process. For
	// many concurrent writers, runtime.GOMAXPROCS(0) is a good value.
	Partitions int

	// Listeners receive a RegisterEvent for every registration and an
	// UnregisterEvent when a process's last entry under a key goes by
	// Unregister, UnregisterMatch or a freed via name (an UnregisterMatch
	// that leaves the process other entries under the key is not an
	// unregister, as in Elixir). They are not told of entries removed
	// because their process exited: a listener that needs that monitors
	// the process (as in Elixir). Events are sent after the registry's
	// locks are released, with Node.SendTo, so an unregistered name or a
	// dead listener simply misses them.
	Listeners []gotp.Dest

	// Meta is the initial metadata (see Registry.Meta). It is copied at
	// each start. Keys must be comparable.
	Meta map[any]any
}

// An Entry is one registration: the process that made it and its value.
type Entry[V any] struct {
	PID   gotp.PID
	Value V
}

// An Item is one registration with its key, as All and Select return them.
type Item[K comparable, V any] struct {
	Key   K
	PID   gotp.PID
	Value V
}

// RegisterEvent is sent to every listener after a registration.
type RegisterEvent[K comparable, V any] struct {
	Registry gotp.PID // the registry's process
	Key      K
	PID      gotp.PID // the process that registered
	Value    V
}

// UnregisterEvent is sent to every listener after Unregister,
// UnregisterMatch or a via name's UnregisterName removed the last entries
// of PID under Key.
type UnregisterEvent[K comparable] struct {
	Registry gotp.PID
	Key      K
	PID      gotp.PID
}

var (
	// ErrNotRunning is returned by operations on a registry whose process
	// has not been started or has exited.
	ErrNotRunning = errors.New("registry: not running")
	// ErrAlreadyRunning is returned by Start on a running registry.
	ErrAlreadyRunning = errors.New("registry: already running")
	// ErrNotUnique is returned by operations that need a unique registry
	// (UpdateValue, via names) when called on a duplicate one.
	ErrNotUnique = errors.New("registry: not a unique registry")
	// ErrNotRegistered is returned by UpdateValue when the calling process
	// does not hold the key.
	ErrNotRegistered = errors.New("registry: key not held by this process")
	// ErrBadOptions is wrapped by the error of New for invalid Options.
	ErrBadOptions = errors.New("registry: bad options")
	// ErrBadKey is returned by Register and UpdateValue for a key that is
	// not comparable at run time: a key of an interface type (or a struct
	// holding one) whose dynamic value is a slice, map or function; or for a
	// key that is not equal to itself because it holds a floating-point NaN
	// (it could never be found again). Reads with such a key find nothing.
	ErrBadKey = errors.New("registry: key is not comparable")
	// ErrBadMetaKey is returned by PutMeta (and New) for a metadata key that
	// is not comparable.
	ErrBadMetaKey = errors.New("registry: metadata key is not comparable")
)

// AlreadyRegisteredError is returned by Register on a unique registry when
// the key is held by a live process (Elixir's {:already_registered, pid}).
type AlreadyRegisteredError struct {
	Key   any
	Owner gotp.PID // the process that holds the key
}

// Error names the key and its holder.
func (e *AlreadyRegisteredError) Error() string {
	return fmt.Sprintf("registry: key %v already registered to %v", e.Key, e.Owner)
}

// A Registry maps keys to processes, each with a value. It is generic in
// the key (any comparable type) and the value.
//
// A Registry is safe for concurrent use by multiple goroutines. No read
// waits for a process. On a unique registry, Lookup, Find, Match, Values,
// Dispatch and Count take no lock at all; Keys, All, Select and Info take
// short exclusive locks (see the package documentation). On a duplicate
// registry Count takes no lock, and every other read takes read locks of
// the partitions it looks at, so reads never wait for each other, nor for
// writes to other partitions. Meta waits only for a concurrent PutMeta.
type Registry[K comparable, V any] struct {
	n         *gotp.Node
	kind      Kind
	nparts    int
	listeners []gotp.Dest
	meta0     map[any]any
	seed      maphash.Seed
	nodeName  string // with creation, rebuilds the PIDs of entries
	creation  uint32
	keyCheck  uint8  // what keys are checked for before hashing (keyCheckOf)
	intSize   uint8  // K's size if K is an integer type (see hash), or 0
	intSeed   uint64 // random key of hash for integer keys

	startMu sync.Mutex // serialises Start and Stop
	t       atomic.Pointer[table[K, V]]
}

// New returns a registry on node n, not yet running: Start starts its
// process (and restarts it after it exited, with empty tables). It fails
// with an error wrapping ErrBadOptions for a negative Partitions, an
// unknown Kind or a nil listener, and with ErrBadMetaKey for a metadata key
// that is not comparable.
func New[K comparable, V any](n *gotp.Node, opts Options) (*Registry[K, V], error) {
	if n == nil {
		return nil, fmt.Errorf("%w: nil node", ErrBadOptions)
	}
	if opts.Kind != Unique && opts.Kind != Duplicate {
		return nil, fmt.Errorf("%w: kind %v", ErrBadOptions, opts.Kind)
	}
	if opts.Partitions < 0 || opts.Partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: %d partitions (at most %d)", ErrBadOptions, opts.Partitions, MaxPartitions)
	}
	for i, l := range opts.Listeners {
		if l == nil {
			return nil, fmt.Errorf("%w: listener %d is nil", ErrBadOptions, i)
		}
	}
	for k := range opts.Meta {
		if err := checkMetaKey(k); err != nil {
			return nil, err
		}
	}
	r := &Registry[K, V]{
		n:         n,
		kind:      opts.Kind,
		nparts:    max(opts.Partitions, 1),
		listeners: append([]gotp.Dest(nil), opts.Listeners...),
		meta0:     make(map[any]any, len(opts.Meta)),
		seed:      maphash.MakeSeed(),
		nodeName:  n.Name(),
		creation:  n.Creation(),
		keyCheck:  keyCheckOf(reflect.TypeFor[K]()),
		intSize:   intKeySize(reflect.TypeFor[K]()),
		intSeed:   rand.Uint64(),
	}
	for k, v := range opts.Meta {
		r.meta0[k] = v
	}
	return r, nil
}

// Start returns a running registry: New, then Registry.Start with spawn
// options sopts (gotp.Named to name its process, gotp.LinkTo to link it to
// a parent).
func Start[K comparable, V any](ctx context.Context, n *gotp.Node, opts Options, sopts ...gotp.SpawnOption) (*Registry[K, V], error) {
	r, err := New[K, V](n, opts)
	if err != nil {
		return nil, err
	}
	if _, err := r.Start(ctx, sopts...); err != nil {
		return nil, err
	}
	return r, nil
}

// Start spawns the registry's process with empty tables and the initial
// metadata, and returns its PID. The process owns the registry's lifetime
// and nothing else: no operation goes through it. When it exits (Stop, an
// exit signal, Node.Stop) every entry is dropped, the registry stops
// watching the processes that registered, and every operation returns
// ErrNotRunning (reads return nothing) until Start is called again; the
// same *Registry may thus be restarted by a supervisor. Registered
// processes are not told (Elixir links them to the registry; gotp does
// not).
//
// Start fails with ErrAlreadyRunning while the registry runs, with
// ctx.Err() if ctx is done, and with the errors of gotp.Node.SpawnHandler
// (for example a taken gotp.Named name).
func (r *Registry[K, V]) Start(ctx context.Context, sopts ...gotp.SpawnOption) (gotp.PID, error) {
	if err := ctx.Err(); err != nil {
		return gotp.PID{}, err
	}
	r.startMu.Lock()
	defer r.startMu.Unlock()
	if t := r.t.Load(); t != nil && !t.closed.Load() {
		return t.pid, ErrAlreadyRunning
	}
	t := newTable(r)
	opts := append([]gotp.SpawnOption{gotp.Behaviour("registry " + r.kind.String())}, sopts...)
	init := func(p *gotp.Process) error {
		p.SetValue(InfoKey, Infoer(r))
		return nil
	}
	pid, err := r.n.SpawnHandler(gotp.HandlerFunc(ignoreMessage), init, opts...)
	if err != nil {
		return gotp.PID{}, err
	}
	t.pid = pid
	r.t.Store(t)
	r.n.MonitorFunc(pid, func(gotp.Down) { t.close() })
	return pid, nil
}

// ignoreMessage is the registry process's handler: it has nothing to do.
func ignoreMessage(*gotp.Process, any) (bool, error) { return false, nil }

// Stop stops the registry's process with gotp.ErrShutdown and waits until
// its tables are dropped, or until ctx ends (it then returns ctx.Err()).
// Stopping a registry that is not running returns nil.
func (r *Registry[K, V]) Stop(ctx context.Context) error {
	r.startMu.Lock()
	t := r.t.Load()
	r.startMu.Unlock()
	if t == nil {
		return nil
	}
	r.n.Exit(t.pid, gotp.ErrShutdown)
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PID returns the registry's process, or the zero PID if it has never
// been started. It is safe from any goroutine.
func (r *Registry[K, V]) PID() gotp.PID {
	if t := r.t.Load(); t != nil {
		return t.pid
	}
	return gotp.PID{}
}

// Running reports whether the registry's process is running.
func (r *Registry[K, V]) Running() bool {
	t := r.t.Load()
	return t != nil && !t.closed.Load()
}

// InfoKey is the key under which a registry's process keeps, in its
// process dictionary (gotp.Process.Value), an Infoer for introspection.
const InfoKey = "gotp/registry"

// Infoer is what a registry's process keeps under InfoKey: the registry
// itself, so that introspection can find registries among processes
// (gotp.Node.ProcessValue) and ask for their Info.
type Infoer interface{ Info() Info }

// Kind returns the registry's kind.
func (r *Registry[K, V]) Kind() Kind { return r.kind }

// Partitions returns the number of partitions.
func (r *Registry[K, V]) Partitions() int { return r.nparts }

// Node returns the node the registry belongs to.
func (r *Registry[K, V]) Node() *gotp.Node { return r.n }

// live returns the running table, or nil.
func (r *Registry[K, V]) live() *table[K, V] {
	t := r.t.Load()
	if t == nil || t.closed.Load() {
		return nil
	}
	return t
}

// refOf rebuilds a Ref made by the registry's node from its number.
func (r *Registry[K, V]) refOf(id uint64) gotp.Ref { return gotp.NewRef(r.nodeName, r.creation, id) }

// pidOf rebuilds the PID of a local process from its number.
func (r *Registry[K, V]) pidOf(id uint64) gotp.PID { return gotp.NewPID(r.nodeName, r.creation, id) }

// What a key of type K may hold that makes it unusable (see keyCheckOf).
const (
	keyCheckNone  uint8 = iota // every value of K is a good key
	keyCheckNaN                // K holds floats: a NaN is never equal to itself
	keyCheckIface              // K holds interfaces: uncomparable values, and NaNs
)

// keyCheckOf reports what values of t may be bad keys although t satisfies
// comparable: a value that == panics on (an interface holding a slice, map
// or function), or one that is not equal to itself (a NaN in a float, a
// complex number or an interface). A key of the second kind could be
// stored but never found again, not even by its holder's cleanup.
func keyCheckOf(t reflect.Type) uint8 {
	switch t.Kind() {
	case reflect.Interface:
		return keyCheckIface
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return keyCheckNaN
	case reflect.Array:
		return keyCheckOf(t.Elem())
	case reflect.Struct:
		c := keyCheckNone
		for i := range t.NumField() {
			c = max(c, keyCheckOf(t.Field(i).Type))
		}
		return c
	}
	return keyCheckNone
}

// badKey reports whether key cannot be hashed or compared, or is not equal
// to itself. It is small enough to be inlined, so that keys of types that
// can hold neither an interface nor a float cost one test.
func (r *Registry[K, V]) badKey(key K) bool {
	return r.keyCheck != keyCheckNone && r.checkKey(key)
}

// checkKey is badKey's test for keys that need one. It is kept out of line
// so that badKey stays small enough to inline.
//
//go:noinline
func (r *Registry[K, V]) checkKey(key K) bool {
	if r.keyCheck == keyCheckIface && uncomparable(key) {
		return true
	}
	return key != key // a NaN somewhere in key
}

// uncomparable reports whether key holds an uncomparable value. It must
// not take key's address: that would move every key to the heap, in every
// operation, and the garbage collector would then rescan a large registry
// again and again.
func uncomparable[K comparable](key K) bool {
	x := any(key)
	return x != nil && !reflect.ValueOf(x).Comparable()
}

// hash returns the hash of key: a unique registry's partition comes from
// its high bits (uniquePart), the key's table and slot in the partition
// from the others (see utable.go). Integer keys are hashed by mixInt, a few
// instructions with no call, where hash/maphash takes two calls and an
// indirect one: a lookup in a large registry waits on one cache miss, and
// the fewer instructions stand between two lookups, the more of those
// misses the processor overlaps. Other keys go through hash/maphash.
func (r *Registry[K, V]) hash(key K) uint64 {
	switch r.intSize {
	case 8:
		return mixInt(*(*uint64)(unsafe.Pointer(&key)) ^ r.intSeed)
	case 4:
		return mixInt(uint64(*(*uint32)(unsafe.Pointer(&key))) ^ r.intSeed)
	case 2:
		return mixInt(uint64(*(*uint16)(unsafe.Pointer(&key))) ^ r.intSeed)
	case 1:
		return mixInt(uint64(*(*uint8)(unsafe.Pointer(&key))) ^ r.intSeed)
	}
	return maphash.Comparable(r.seed, key)
}

// mixInt is MurmurHash3's 64-bit finalizer: a bijection in which every
// input bit flips each output bit with probability close to 1/2. Keyed by
// xoring a random seed into its input, it spreads any set of integers
// (sequential ones included) over the high bits, which pick a key's
// partition and table, and the low bits, which pick its slot.
func mixInt(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// intKeySize returns the size of K if its values are plain integers, whose
// equality is that of their bits, and 0 otherwise.
func intKeySize(t reflect.Type) uint8 {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return uint8(t.Size())
	}
	return 0
}

// hashPart returns the partition of a key with hash h in a unique
// registry.
func (r *Registry[K, V]) hashPart(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(r.nparts))
	return int(hi)
}

// uniquePart returns the partition of a key with hash h in a unique
// registry.
func (r *Registry[K, V]) uniquePart(h uint64) int {
	if r.nparts == 1 {
		return 0
	}
	return r.hashPart(h)
}

// pidPart returns the partition of a process: where a duplicate registry
// keeps its entries, and where any registry keeps its owner record.
func (r *Registry[K, V]) pidPart(pid gotp.PID) int {
	if r.nparts == 1 {
		return 0
	}
	return int(pid.ID() % uint64(r.nparts))
}

// ---- tables ----

// table is one incarnation of a registry: the partitions of one run of its
// process. A restart makes a new table; callbacks of an old one touch
// only it.
type table[K comparable, V any] struct {
	r      *Registry[K, V]
	pid    gotp.PID
	parts  []partition[K, V]
	us     []*uindex[K, V] // unique: the entries of each partition, for readers (parts[i].u == us[i])
	ks     []keyStripe[K]  // unique: the keys of each process, by process ID modulo keyStripes
	closed atomic.Bool
	done   chan struct{} // closed once close has dropped everything

	metaMu sync.RWMutex // guards meta
	meta   map[any]any

	lockOnce sync.Once       // makes locks, on the first Lock
	locks    []lockStripe[K] // Lock's per-key locks, by key hash
}

// A partition holds entries and the bookkeeping for the processes that
// own them. Everything in it is guarded by mu, except the entries of a
// unique partition (u), which readers read without any lock and writers
// write under the locks of its tables (see utable.go), and count, which is
// atomic. A unique registry keeps the keys of its processes in the table's
// key stripes, not in keys. Processes are indexed by PID.ID(): only live
// local processes can register (register checks that they are alive), and
// IDs are unique within a node incarnation; an ID map hashes and compares
// faster than a PID map.
type partition[K comparable, V any] struct {
	mu     sync.RWMutex
	u      *uindex[K, V]          // unique: key → entry (table.us[i]); never replaced
	dup    map[K]*bucket[V]       // duplicate: key → entries of this partition's processes
	keys   map[uint64]*pidKeys[K] // duplicate: process ID → its keys held in this partition
	owners map[uint64]*owner      // process ID (of this partition's processes) → monitor record
	count  atomic.Int64           // duplicate: entries; written under mu
	_      [64]byte               // keep partitions' locks on separate cache lines
}

// keyStripe is the bookkeeping of a unique registry for the processes
// whose IDs are equal modulo keyStripes: their keys in every partition,
// and how many entries they hold. A writer takes a stripe's mu after it
// has released any table lock, and never holds two stripes' locks: writers
// for different processes thus rarely share a lock or a cache line.
type keyStripe[K comparable] struct {
	mu    sync.Mutex
	keys  map[uint64]*pidKeys[K] // process ID → its keys; guarded by mu
	count atomic.Int64           // entries held by the stripe's processes
	_     [64]byte
}

const keyStripes = 16

// stripe returns the key stripe of process id in a unique registry.
func (t *table[K, V]) stripe(id uint64) *keyStripe[K] { return &t.ks[id%keyStripes] }

// pidKeys are the keys one process holds: in a unique registry, all of
// them, in a list (indexed once it is long and loses a key); in one
// partition of a duplicate one, with counts.
type pidKeys[K comparable] struct {
	list   []K
	idx    map[K]int32 // key → index in list, once built
	counts map[K]int32
	buf    [1]K // list's first backing array: one allocation fewer for one key
}

const pidKeysIndexAt = 16 // a list this long gets an index when it loses a key

func (pk *pidKeys[K]) add(key K) {
	if pk.idx != nil {
		pk.idx[key] = int32(len(pk.list))
	}
	pk.list = append(pk.list, key)
}

// remove removes key from the list, if there.
func (pk *pidKeys[K]) remove(key K) {
	i := -1
	switch {
	case pk.idx != nil:
		if j, ok := pk.idx[key]; ok {
			i = int(j)
		}
	case len(pk.list) <= pidKeysIndexAt:
		for j, k := range pk.list {
			if k == key {
				i = j
				break
			}
		}
	default:
		pk.idx = make(map[K]int32, len(pk.list))
		for j, k := range pk.list {
			pk.idx[k] = int32(j)
		}
		if j, ok := pk.idx[key]; ok {
			i = int(j)
		}
	}
	if i < 0 {
		return
	}
	last := len(pk.list) - 1
	if pk.idx != nil {
		delete(pk.idx, key)
		if i != last {
			pk.idx[pk.list[last]] = int32(i)
		}
	}
	pk.list[i] = pk.list[last]
	var zero K
	pk.list[last] = zero
	pk.list = pk.list[:last]
}

// owner records that the registry watches a process: one MonitorFunc per
// (registry incarnation, process), and the partitions where it may hold
// keys.
//
// refID is the monitor's Ref.ID() (the Ref is rebuilt from the node's name
// and creation, as MonitorFunc makes it); it is set without the partition's
// lock once MonitorFunc returns, and 0 until then.
type owner struct {
	pid   gotp.PID
	refID atomic.Uint64
	parts []int32
	buf   [2]int32 // parts' first backing array
}

func newTable[K comparable, V any](r *Registry[K, V]) *table[K, V] {
	t := &table[K, V]{
		r:     r,
		parts: make([]partition[K, V], r.nparts),
		done:  make(chan struct{}),
		meta:  make(map[any]any, len(r.meta0)),
	}
	for k, v := range r.meta0 {
		t.meta[k] = v
	}
	if r.kind == Unique {
		t.ks = make([]keyStripe[K], keyStripes)
		for i := range t.ks {
			t.ks[i].keys = make(map[uint64]*pidKeys[K])
		}
		t.us = make([]*uindex[K, V], r.nparts)
		for i := range t.parts {
			t.us[i] = newUindex[K, V]()
			t.parts[i].u = t.us[i]
		}
	}
	for i := range t.parts {
		t.parts[i].reset(r.kind)
	}
	return t
}

func (pt *partition[K, V]) reset(kind Kind) {
	if kind == Unique {
		pt.u.clear()
	} else {
		pt.dup = make(map[K]*bucket[V])
		pt.keys = make(map[uint64]*pidKeys[K])
	}
	pt.owners = make(map[uint64]*owner)
	pt.count.Store(0)
}

// close drops every entry and every monitor. It runs on the goroutine that
// ends the registry's process.
func (t *table[K, V]) close() {
	if !t.closed.CompareAndSwap(false, true) {
		return
	}
	type watch struct {
		ref gotp.Ref
		pid gotp.PID
	}
	var ws []watch
	for i := range t.parts {
		pt := &t.parts[i]
		pt.mu.Lock()
		for _, o := range pt.owners {
			if id := o.refID.Load(); id != 0 {
				ws = append(ws, watch{t.r.refOf(id), o.pid})
			}
		}
		pt.reset(t.r.kind)
		pt.mu.Unlock()
	}
	for i := range t.ks {
		ks := &t.ks[i]
		ks.mu.Lock()
		ks.keys = make(map[uint64]*pidKeys[K])
		ks.count.Store(0)
		ks.mu.Unlock()
	}
	for _, w := range ws {
		t.r.n.Demonitor(w.ref, w.pid)
	}
	close(t.done)
}

// track makes sure the registry watches pid and knows it may hold keys in
// partition pi. It is called after pid got its first key in pi.
func (t *table[K, V]) track(pid gotp.PID, pi int) {
	pp := &t.parts[t.r.pidPart(pid)]
	pp.mu.Lock()
	if t.closed.Load() {
		pp.mu.Unlock()
		return
	}
	o := pp.owners[pid.ID()]
	isNew := o == nil
	if isNew {
		o = &owner{pid: pid}
		o.parts = o.buf[:0]
		pp.owners[pid.ID()] = o
	}
	found := false
	for _, p := range o.parts {
		if int(p) == pi {
			found = true
			break
		}
	}
	if !found {
		o.parts = append(o.parts, int32(pi))
	}
	pp.mu.Unlock()
	if !isNew {
		return
	}
	// If pid is already dead the callback runs here, at once, and drops
	// what was just registered.
	ref := t.r.n.MonitorFunc(pid, func(gotp.Down) { t.cleanup(o) })
	// close stores closed before it reads refID; this stores refID before
	// it reads closed: one of the two demonitors (both is harmless).
	o.refID.Store(ref.ID())
	if t.closed.Load() {
		t.r.n.Demonitor(ref, pid)
	}
}

// cleanup drops every entry of a process that exited. It runs on the
// goroutine that ends the process, right after it is dead.
func (t *table[K, V]) cleanup(o *owner) {
	if !t.dropOwner(o) {
		return
	}
	if t.us != nil {
		t.dropUniquePID(o.pid)
		return
	}
	for _, pi := range o.parts {
		pt := &t.parts[pi]
		pt.mu.Lock()
		pt.dropPIDLocked(o.pid)
		pt.mu.Unlock()
	}
}

// dropOwner removes the owner record o of an exited process, and reports
// whether it was still the process's record. cleanup's frames are kept
// small (see gotp's exit): it runs as a MonitorFunc callback, often on a
// handler goroutine's first stack, and the map delete here is its deepest
// call.
//
//go:noinline
func (t *table[K, V]) dropOwner(o *owner) bool {
	id := o.pid.ID()
	pp := &t.parts[t.r.pidPart(o.pid)]
	pp.mu.Lock()
	mine := pp.owners[id] == o
	if mine {
		delete(pp.owners, id)
	}
	pp.mu.Unlock()
	return mine
}

// dropPIDLocked removes every entry of pid in a duplicate partition.
func (pt *partition[K, V]) dropPIDLocked(pid gotp.PID) {
	pk := pt.keys[pid.ID()]
	if pk == nil {
		return
	}
	delete(pt.keys, pid.ID())
	for k := range pk.counts {
		if b := pt.dup[k]; b != nil {
			pt.count.Add(-int64(b.removePID(pid, nil)))
			if b.n == 0 {
				delete(pt.dup, k)
			}
		}
	}
}

// dropUniquePID removes every entry of pid from a unique registry.
func (t *table[K, V]) dropUniquePID(pid gotp.PID) {
	ks := t.stripe(pid.ID())
	ks.mu.Lock()
	pk := ks.keys[pid.ID()]
	delete(ks.keys, pid.ID())
	ks.mu.Unlock()
	if pk == nil {
		return
	}
	for _, k := range pk.list {
		h := t.r.hash(k)
		if t.us[t.r.uniquePart(h)].killHeld(h, k, pid.ID()) {
			ks.count.Add(-1)
		}
	}
}

// unlist removes key from the keys of process id in a unique registry.
func (t *table[K, V]) unlist(id uint64, key K) {
	ks := t.stripe(id)
	ks.mu.Lock()
	if pk := ks.keys[id]; pk != nil {
		pk.remove(key)
		if len(pk.list) == 0 {
			delete(ks.keys, id)
		}
	}
	ks.mu.Unlock()
}

// removeDupLocked removes the entries of pid under key whose values match
// accepts (all of them if match is nil) and returns how many it removed,
// and whether pid has none left under key.
func (pt *partition[K, V]) removeDupLocked(pid gotp.PID, key K, match func(V) bool) (removed int, last bool) {
	b := pt.dup[key]
	if b == nil {
		return 0, false
	}
	removed = b.removePID(pid, match)
	if removed == 0 {
		return 0, false
	}
	pt.count.Add(-int64(removed))
	if b.n == 0 {
		delete(pt.dup, key)
	}
	last = true
	if pk := pt.keys[pid.ID()]; pk != nil {
		if c := pk.counts[key] - int32(removed); c > 0 {
			pk.counts[key] = c
			last = false
		} else {
			delete(pk.counts, key)
			if len(pk.counts) == 0 {
				delete(pt.keys, pid.ID())
			}
		}
	}
	return removed, last
}

// ---- metadata ----

func checkMetaKey(k any) error {
	if k == nil || !reflect.ValueOf(k).Comparable() {
		return fmt.Errorf("%w: %T", ErrBadMetaKey, k)
	}
	return nil
}

// Meta returns the metadata stored under key (set in Options.Meta or by
// PutMeta, and not deleted by DeleteMeta since), and whether there was any. It returns false when the registry
// is not running. It is safe from any goroutine and waits only for a
// concurrent PutMeta.
func (r *Registry[K, V]) Meta(key any) (any, bool) {
	t := r.live()
	if t == nil || checkMetaKey(key) != nil {
		return nil, false
	}
	t.metaMu.RLock()
	v, ok := t.meta[key]
	t.metaMu.RUnlock()
	return v, ok
}

// DeleteMeta removes key from the registry's metadata, so that a later
// Meta of key finds nothing (Elixir's Registry.delete_meta/2). Deleting a
// key that is not there does nothing. It fails with ErrBadMetaKey when key
// is not comparable and with ErrNotRunning when the registry is not
// running; like PutMeta, it lasts until the registry's process exits (a
// restart starts again from Options.Meta).
func (r *Registry[K, V]) DeleteMeta(key any) error {
	if err := checkMetaKey(key); err != nil {
		return err
	}
	t := r.live()
	if t == nil {
		return ErrNotRunning
	}
	t.metaMu.Lock()
	delete(t.meta, key)
	t.metaMu.Unlock()
	return nil
}

// PutMeta stores value under key in the registry's metadata, for every
// later Meta. It fails with ErrBadMetaKey when key is not comparable and
// with ErrNotRunning when the registry is not running. Metadata lasts as
// long as the registry's process: a restart starts again from
// Options.Meta.
func (r *Registry[K, V]) PutMeta(key, value any) error {
	if err := checkMetaKey(key); err != nil {
		return err
	}
	t := r.live()
	if t == nil {
		return ErrNotRunning
	}
	t.metaMu.Lock()
	t.meta[key] = value
	t.metaMu.Unlock()
	return nil
}
