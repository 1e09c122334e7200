package gotp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// crashNode returns a node whose logs a LogRecorder keeps.
func crashNode(t *testing.T) (*gotp.Node, *gotptest.LogRecorder) {
	t.Helper()
	rec := gotptest.NewLogRecorder()
	return gotptest.NewNode(t, gotptest.Name("crash"), gotptest.Logger(rec.Logger())), rec
}

// str returns the attribute key of r as text ("" if absent).
func str(r gotptest.Record, key string) string {
	v, ok := r.Attrs[key]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

func has(r gotptest.Record, key string) bool {
	_, ok := r.Attrs[key]
	return ok
}

// exitOfFunc spawns fn and returns its PID and its exit reason, once its
// exit is complete.
func exitOfFunc(t *testing.T, n *gotp.Node, fn func(p *gotp.Process) error, opts ...gotp.SpawnOption) (gotp.PID, error) {
	t.Helper()
	start := make(chan struct{})
	pid, err := n.Spawn(func(p *gotp.Process) error {
		<-start
		return fn(p)
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := gotptest.Watch(t, n, pid)
	close(start)
	return pid, gotptest.Recv(t, done)
}

// reports returns the crash reports of pid.
func reports(rec *gotptest.LogRecorder, pid gotp.PID) []gotptest.Record {
	var out []gotptest.Record
	for _, r := range rec.Find(gotp.CrashReportMsg) {
		if r.Attrs["pid"] == pid {
			out = append(out, r)
		}
	}
	return out
}

// oneReport returns the only crash report of pid, which is already logged
// when the process's exit is complete.
func oneReport(t *testing.T, rec *gotptest.LogRecorder, pid gotp.PID) gotptest.Record {
	t.Helper()
	rs := reports(rec, pid)
	if len(rs) != 1 {
		t.Fatalf("crash reports of %v: %d, want 1 (all records: %v)", pid, len(rs), rec.Records())
	}
	if rs[0].Level != slog.LevelError {
		t.Errorf("level %v, want ERROR", rs[0].Level)
	}
	return rs[0]
}

func panicky(*gotp.Process) error { panic("boom in a function") }

func TestCrashReportPanicInFunction(t *testing.T) {
	n, rec := crashNode(t)
	pid, reason := exitOfFunc(t, n, panicky, gotp.Named("worker"), gotp.Behaviour("importer"))
	if _, ok := errors.AsType[*gotp.PanicError](reason); !ok {
		t.Fatalf("reason %v", reason)
	}
	r := oneReport(t, rec, pid)
	for key, want := range map[string]string{
		"name":      "worker",
		"behaviour": "importer",
		"reason":    "panic: boom in a function",
		"panic":     `"boom in a function"`,
	} {
		if got := str(r, key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	// The stack is the panicking goroutine's, down to the function that
	// panicked.
	if st := str(r, "stack"); !strings.Contains(st, "gotp_test.panicky") || !strings.Contains(st, "crash_test.go") {
		t.Errorf("stack does not show the panic:\n%s", st)
	}
	if has(r, "last_message") {
		t.Errorf("a function process has no last message: %v", r.Attrs)
	}
}

func TestCrashReportErrorReturned(t *testing.T) {
	n, rec := crashNode(t)
	watcher := gotptest.NewSink(t, n).PID()
	pid, _ := exitOfFunc(t, n, func(p *gotp.Process) error {
		p.Link(watcher)
		p.TrapExit(true)
		return fmt.Errorf("import: %w", errBoom)
	})
	r := oneReport(t, rec, pid)
	if got := str(r, "reason"); got != "import: boom" {
		t.Errorf("reason %q", got)
	}
	if has(r, "stack") || has(r, "panic") || has(r, "name") {
		t.Errorf("an error is not a panic, and the process has no name: %v", r.Attrs)
	}
	if str(r, "trap_exit") != "true" || !strings.Contains(str(r, "links"), watcher.String()) {
		t.Errorf("trap_exit %q links %q, want true and %v", str(r, "trap_exit"), str(r, "links"), watcher)
	}
}

type order struct {
	ID    int
	Items []string
}

func TestCrashReportHandlerPanicHasLastMessage(t *testing.T) {
	n, rec := crashNode(t)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if o, ok := msg.(order); ok && o.ID == 7 {
			panic(fmt.Sprintf("cannot ship order %d", o.ID))
		}
		return false, nil
	})
	pid, err := n.SpawnHandler(h, nil, gotp.Behaviour("shipper"))
	if err != nil {
		t.Fatal(err)
	}
	done := gotptest.Watch(t, n, pid)
	n.Send(pid, order{ID: 1})
	n.Send(pid, order{ID: 7, Items: []string{"tea", "cups"}})
	gotptest.Recv(t, done)
	r := oneReport(t, rec, pid)
	if got, want := str(r, "last_message"), `gotp_test.order{ID: 7, Items: []string{"tea", "cups"}}`; got != want {
		t.Errorf("last_message %q, want %q", got, want)
	}
	if got := str(r, "handled"); got != "2" {
		t.Errorf("handled %q, want 2", got)
	}
	if !strings.Contains(str(r, "stack"), "crash_test.go") {
		t.Errorf("stack:\n%s", str(r, "stack"))
	}
}

func TestCrashReportHandlerStopsWithError(t *testing.T) {
	n, rec := crashNode(t)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) { return true, errBoom })
	pid, err := n.SpawnHandler(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := gotptest.Watch(t, n, pid)
	n.Send(pid, "the last straw")
	gotptest.Recv(t, done)
	r := oneReport(t, rec, pid)
	if str(r, "reason") != "boom" || str(r, "last_message") != `"the last straw"` {
		t.Errorf("report %v", r.Attrs)
	}
}

func TestCrashReportInlineHandler(t *testing.T) {
	n, rec := crashNode(t)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) { panic(errBoom) })
	pid, err := n.SpawnHandler(h, nil, gotp.AllowInline())
	if err != nil {
		t.Fatal(err)
	}
	done := gotptest.Watch(t, n, pid)
	if !n.RunInline(pid, 42) {
		t.Fatal("RunInline refused an idle process")
	}
	gotptest.Recv(t, done)
	if r := oneReport(t, rec, pid); str(r, "last_message") != "42" {
		t.Errorf("report %v", r.Attrs)
	}
}

func TestCrashReportGoexit(t *testing.T) {
	n, rec := crashNode(t)
	pid, reason := exitOfFunc(t, n, func(p *gotp.Process) error { runtime.Goexit(); return nil })
	if !errors.Is(reason, gotp.ErrGoexit) {
		t.Fatalf("reason %v", reason)
	}
	if r := oneReport(t, rec, pid); str(r, "reason") != gotp.ErrGoexit.Error() {
		t.Errorf("report %v", r.Attrs)
	}
}

func TestCrashReportInitPanicButNotInitError(t *testing.T) {
	n, rec := crashNode(t)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) { return false, nil })
	var panicked, failed gotp.PID
	_, err := n.SpawnHandler(h, func(p *gotp.Process) error { panicked = p.Self(); panic("bad config") })
	if _, ok := errors.AsType[*gotp.PanicError](err); !ok {
		t.Fatalf("SpawnHandler: %v", err)
	}
	_, err = n.SpawnHandler(h, func(p *gotp.Process) error { failed = p.Self(); return errBoom })
	if !errors.Is(err, errBoom) {
		t.Fatalf("SpawnHandler: %v", err)
	}
	if r := oneReport(t, rec, panicked); str(r, "in_init") != "true" || !strings.Contains(str(r, "stack"), "crash_test.go") {
		t.Errorf("report %v", r.Attrs)
	}
	if rs := reports(rec, failed); len(rs) != 0 {
		t.Errorf("an init error goes back to the caller, yet was reported: %v", rs)
	}
}

// reporter is a Handler that adds its own attributes to its crash report.
type reporter struct {
	panicInReport bool
}

func (r *reporter) HandleMessage(p *gotp.Process, msg any) (bool, error) {
	return true, errBoom
}

func (r *reporter) CrashReport(p *gotp.Process, msg any, reason error) []slog.Attr {
	if r.panicInReport {
		panic("report failed")
	}
	return []slog.Attr{slog.String("request", fmt.Sprint("unwrapped ", msg)), slog.String("why", reason.Error())}
}

func TestCrashReporterAddsAttributes(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprint("panics=", panics), func(t *testing.T) {
			n, rec := crashNode(t)
			pid, err := n.SpawnHandler(&reporter{panicInReport: panics}, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := gotptest.Watch(t, n, pid)
			n.Send(pid, "req")
			gotptest.Recv(t, done)
			r := oneReport(t, rec, pid)
			if panics {
				if str(r, "crash_report_panic") != `"report failed"` || str(r, "last_message") != `"req"` {
					t.Errorf("report %v", r.Attrs)
				}
				return
			}
			if str(r, "request") != "unwrapped req" || str(r, "why") != "boom" || has(r, "last_message") {
				t.Errorf("report %v", r.Attrs)
			}
		})
	}
}

// TestNoCrashReportForNormalExits: normal and shutdown exits, and exits
// caused by an exit signal, are not reported; in a chain of linked
// processes only the one that crashed is.
func TestNoCrashReportForNormalExits(t *testing.T) {
	n, rec := crashNode(t)
	exitOfFunc(t, n, func(*gotp.Process) error { return nil })
	exitOfFunc(t, n, func(*gotp.Process) error { return gotp.ErrShutdown })
	exitOfFunc(t, n, func(*gotp.Process) error { return fmt.Errorf("draining: %w", gotp.ErrShutdown) })
	exitOfFunc(t, n, func(*gotp.Process) error { panic(gotp.ErrShutdown) })

	stopper := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) { e, _ := msg.(error); return true, e })
	for _, reason := range []error{nil, gotp.ErrShutdown} {
		pid, err := n.SpawnHandler(stopper, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := gotptest.Watch(t, n, pid)
		n.Send(pid, reason)
		gotptest.Recv(t, done)
	}

	// Killed from outside, and killed by a link: no report.
	victim := waiter(t, n)
	done := gotptest.Watch(t, n, victim)
	n.Exit(victim, gotp.ErrKill)
	gotptest.Recv(t, done)

	linked := waiter(t, n)
	linkedDone := gotptest.Watch(t, n, linked)
	crasher, reason := exitOfFunc(t, n, func(p *gotp.Process) error {
		p.Link(linked)
		return errBoom
	})
	if !errors.Is(reason, errBoom) || !errors.Is(gotptest.Recv(t, linkedDone), errBoom) {
		t.Fatal("the link did not carry the crash")
	}
	all := rec.Find(gotp.CrashReportMsg)
	if len(all) != 1 || all[0].Attrs["pid"] != crasher {
		t.Fatalf("want one report, of the crasher %v; got %v", crasher, all)
	}
}

// TestCrashReportOffWhenErrorDisabled: a logger not enabled for Error
// turns reports off (the handler's Handle is never called).
func TestCrashReportOffWhenErrorDisabled(t *testing.T) {
	rec := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Logger(slog.New(aboveError{rec})))
	exitOfFunc(t, n, panicky)
	if rs := rec.Records(); len(rs) != 0 {
		t.Fatalf("records: %v", rs)
	}
}

// aboveError is a handler enabled only above level Error.
type aboveError struct{ slog.Handler }

func (aboveError) Enabled(_ context.Context, l slog.Level) bool { return l > slog.LevelError }

// TestCrashReportBoundsStack: a long stack is cut. (Go's own tracebacks
// stop at 100 frames, so the long one is made here.)
func TestCrashReportBoundsStack(t *testing.T) {
	n, rec := crashNode(t)
	long := bytes.Repeat([]byte("main.f()\n\t/src/main.go:1 +0x1\n"), 2000)
	pid, _ := exitOfFunc(t, n, func(*gotp.Process) error { return &gotp.PanicError{Value: "deep", Stack: long} })
	st := str(oneReport(t, rec, pid), "stack")
	if len(st) > gotp.CrashStackLimit+64 || !strings.HasSuffix(st, "(stack cut at 16 KiB)") || !strings.HasPrefix(st, "main.f()") {
		t.Errorf("stack of %d bytes, ending %q", len(st), st[max(0, len(st)-40):])
	}
}

// TestCrashReportsDefaultLogger: a node without Options.Logger reports to
// slog.Default.
func TestCrashReportsDefaultLogger(t *testing.T) {
	rec := gotptest.NewLogRecorder()
	old := slog.Default()
	slog.SetDefault(rec.Logger())
	defer slog.SetDefault(old)
	n := gotp.NewNode(gotp.Options{Name: "default"})
	defer n.Stop(context.Background())
	pid, _ := exitOfFunc(t, n, panicky)
	oneReport(t, rec, pid)
}
