package supervisor_test

import (
	"testing"

	"github.com/gotp/gotp/supervisor"
)

func TestSmoke(t *testing.T) {
	n := newNode(t)
	sup, err := supervisor.Start(tctx(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{
		supervisor.Func("a", worker), supervisor.Func("b", worker),
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := mustWhich(t, n, sup)
	t.Log(w)
	down := waitDown(n, w[1].PID)
	n.Send(w[1].PID, exitWith{errBoom})
	t.Log(recvReason(t, down))
	t.Log(mustWhich(t, n, sup))
	in, _ := supervisor.Tree(n, sup)
	t.Logf("%+v", in)
}
