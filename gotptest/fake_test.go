package gotptest

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeT is a TB that records what a helper reports instead of failing the
// real test, so the helpers' failures can be tested. Fatalf ends the
// goroutine, as testing.T's does.
type fakeT struct {
	mu       sync.Mutex
	name     string
	logs     []string
	errors   []string
	fatals   []string
	env      map[string]string
	cleanups []func()
}

func (f *fakeT) Helper()      {}
func (f *fakeT) Name() string { return f.name }

func (f *fakeT) Cleanup(fn func()) {
	f.mu.Lock()
	f.cleanups = append(f.cleanups, fn)
	f.mu.Unlock()
}

func (f *fakeT) Logf(format string, args ...any) {
	f.mu.Lock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Setenv(k, v string) {
	f.mu.Lock()
	if f.env == nil {
		f.env = map[string]string{}
	}
	f.env[k] = v
	f.mu.Unlock()
}

// runFake runs body with a fakeT on a goroutine of its own, then its
// cleanups, last registered first, as the testing package does, and
// returns the fakeT to inspect.
func runFake(body func(f *fakeT)) *fakeT {
	f := &fakeT{name: "fake"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(f)
	}()
	<-done
	for {
		f.mu.Lock()
		if len(f.cleanups) == 0 {
			f.mu.Unlock()
			return f
		}
		fn := f.cleanups[len(f.cleanups)-1]
		f.cleanups = f.cleanups[:len(f.cleanups)-1]
		f.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn()
		}()
		<-done
	}
}

func (f *fakeT) reports() (logs, errors, fatals []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.logs), slices.Clone(f.errors), slices.Clone(f.fatals)
}

// wantFatal checks that f failed once, with a message containing want,
// and reported nothing else as an error.
func wantFatal(t *testing.T, f *fakeT, want string) {
	t.Helper()
	_, errs, fatals := f.reports()
	if len(fatals) != 1 || !strings.Contains(fatals[0], want) || len(errs) != 0 {
		t.Fatalf("fatals %q, errors %q; want one fatal containing %q", fatals, errs, want)
	}
}

// wantPass checks that f reported no failure.
func wantPass(t *testing.T, f *fakeT) {
	t.Helper()
	if _, errs, fatals := f.reports(); len(errs)+len(fatals) != 0 {
		t.Fatalf("errors %q, fatals %q; want none", errs, fatals)
	}
}
