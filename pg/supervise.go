package pg

import (
	"context"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/supervisor"
)

// ChildSpec returns a supervisor child spec (a Permanent Worker with the
// ID ProcessName(id)) that starts the scope id with StartLink. When the
// scope's process dies the scope closes (its memberships are forgotten,
// as Erlang's pg forgets them); the restarted scope starts empty, and
// Lookup and Open find it by id.
func ChildSpec(id string, opts Options) supervisor.ChildSpec {
	return supervisor.ChildSpec{
		ID: ProcessName(id),
		Start: func(ctx context.Context, sup *gotp.Process) (gotp.PID, error) {
			s, err := StartLink(ctx, sup, id, opts)
			if err != nil {
				return gotp.PID{}, err
			}
			return s.PID(), nil
		},
	}
}
