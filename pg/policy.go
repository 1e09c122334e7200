package pg

import "github.com/gotp/gotp"

// Permission names an operation a Policy may allow or deny. The names are
// those of Wippy's pg module.
type Permission string

// The permissions, with the resource each is checked on.
const (
	PermOpen             Permission = "pg.open"               // Scope.Open, Open; resource: the scope id
	PermJoin             Permission = "pg.join"               // Instance.Join; resource: each group name
	PermLeave            Permission = "pg.leave"              // Instance.Leave; resource: each group name
	PermGetMembers       Permission = "pg.get_members"        // Instance.Members; resource: the group name
	PermGetLocalMembers  Permission = "pg.get_local_members"  // Instance.LocalMembers; resource: the group name
	PermBroadcast        Permission = "pg.broadcast"          // Instance.Broadcast; resource: the group name
	PermBroadcastLocal   Permission = "pg.broadcast_local"    // Instance.BroadcastLocal; resource: the group name
	PermMonitor          Permission = "pg.monitor"            // Instance.Monitor; resource: the group name
	PermWhichGroups      Permission = "pg.which_groups"       // Instance.WhichGroups; resource: the scope id
	PermWhichLocalGroups Permission = "pg.which_local_groups" // Instance.WhichLocalGroups; resource: the scope id
	PermEvents           Permission = "pg.events"             // Instance.Events; resource: the scope id
)

// Permissions lists every permission, in the order Wippy's documentation
// lists them.
func Permissions() []Permission {
	return []Permission{
		PermOpen, PermJoin, PermLeave, PermGetMembers, PermGetLocalMembers,
		PermWhichGroups, PermWhichLocalGroups, PermBroadcast, PermBroadcastLocal,
		PermMonitor, PermEvents,
	}
}

// A Policy decides whether the process pid may perform perm on resource
// (a group name, or the scope id for PermOpen, PermWhichGroups,
// PermWhichLocalGroups and PermEvents). The scope asks it before every
// operation, before anything changes; a refused operation fails with
// *DeniedError and has no effect. A batch Join or Leave asks once per
// group and fails as a whole if any group is refused.
//
// Allow is called on the goroutine of the operation, never with a scope
// lock held, possibly from many goroutines at once: it must be safe for
// concurrent use. It may call the scope's read operations, but it should
// be quick: every operation waits for it.
type Policy interface {
	Allow(perm Permission, resource string, pid gotp.PID) bool
}

// PolicyFunc adapts a function to the Policy interface.
type PolicyFunc func(perm Permission, resource string, pid gotp.PID) bool

// Allow calls f.
func (f PolicyFunc) Allow(perm Permission, resource string, pid gotp.PID) bool {
	return f(perm, resource, pid)
}

// AllowAll is the default Policy: it allows every operation.
type AllowAll struct{}

// Allow returns true.
func (AllowAll) Allow(Permission, string, gotp.PID) bool { return true }
