package gotp_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Go code in README.md and in every guide under docs/ is checked by
// TestDocsCode: every ```go block compiles, and the programs run.
//
// How blocks become code:
//   - A block that starts with a package clause (after comments) starts a
//     new program, in a directory of its own. A block without one goes on
//     the end of the file before it, so a guide can show a program in
//     pieces, with prose between them.
//   - A block whose first line is "// file: NAME" is the file NAME; if the
//     block before it was named too, it joins that block's directory (a
//     package and its _test.go file, for example).
//   - A directory with a main package is built and run, and its standard
//     output must match the "// Output:" comment at the end of its last
//     block, when there is one (as in a Go example). One with _test.go
//     files is run with go test. Anything else is built.
//   - "<!-- doctest: build-only -->" on the line before a block's fence
//     builds its program without running it: for servers that run until
//     stopped, programs that need a database or a second process (their
//     examples/ twin has a test that runs them).
//
// Everything is vetted, and run with -race when this test is.

// docFiles returns README.md and every Markdown file under docs/ but the
// benchmark records in docs/bench, which hold no Go programs.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == filepath.Join("docs", "bench") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

// docBlock is one ```go block of a Markdown file.
type docBlock struct {
	doc       string // the Markdown file
	line      int    // of the block's first code line
	code      string
	buildOnly bool
}

var fileComment = regexp.MustCompile(`^// file: (\S+\.go)\s*$`)

func goBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	var cur *docBlock
	var code strings.Builder
	prev := "" // the last non-blank line outside a block
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur = &docBlock{doc: path, line: n + 1, buildOnly: prev == "<!-- doctest: build-only -->"}
			code.Reset()
		case cur == nil && strings.HasPrefix(trimmed, "```go "):
			t.Errorf("%s:%d: write a Go block's fence as ```go alone", path, n)
		case cur != nil && trimmed == "```":
			cur.code = code.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		case trimmed != "":
			prev = trimmed
		}
	}
	if cur != nil {
		t.Errorf("%s:%d: unterminated ```go block", path, cur.line)
	}
	return blocks
}

// docProgram is one directory of code made from blocks.
type docProgram struct {
	dir       string            // under the module root
	files     map[string]string // name → source
	order     []string          // file names in the order they came
	from      docBlock          // the first block, for messages
	buildOnly bool
	main      bool
	tests     bool
	output    *string // expected standard output, if given
}

var packageClause = regexp.MustCompile(`(?m)^package (\w+)`)

// programs groups blocks into programs.
func programs(t *testing.T, root string, blocks []docBlock) []*docProgram {
	t.Helper()
	var progs []*docProgram
	var cur *docProgram
	curFile := ""
	prevNamed := false
	for i, b := range blocks {
		name := ""
		if first, _, _ := strings.Cut(b.code, "\n"); fileComment.MatchString(first) {
			name = fileComment.FindStringSubmatch(first)[1]
		}
		pkg := packageClause.FindStringSubmatch(b.code)
		switch {
		case pkg == nil && cur == nil:
			t.Errorf("%s:%d: a Go block must start a program (a package clause) or continue the one before it", b.doc, b.line)
			continue
		case pkg == nil:
			cur.files[curFile] += "\n" + b.code
		default:
			if cur == nil || name == "" || !prevNamed || cur.from.doc != b.doc {
				cur = &docProgram{
					dir:   filepath.Join(root, fmt.Sprintf("p%02d_%s", len(progs), strings.TrimSuffix(filepath.Base(b.doc), ".md"))),
					files: map[string]string{},
					from:  b,
				}
				progs = append(progs, cur)
			}
			if name == "" {
				name = fmt.Sprintf("block%02d.go", i)
			}
			if _, dup := cur.files[name]; dup {
				t.Errorf("%s:%d: file %s twice in one program", b.doc, b.line, name)
			}
			cur.files[name] = b.code
			cur.order = append(cur.order, name)
			curFile = name
			if pkg[1] == "main" {
				cur.main = true
			}
			if strings.HasSuffix(name, "_test.go") {
				cur.tests = true
			}
		}
		prevNamed = name != ""
		cur.buildOnly = cur.buildOnly || b.buildOnly
	}
	for _, p := range progs {
		if out, ok := expectedOutput(p.files[p.order[len(p.order)-1]]); ok {
			p.output = &out
		}
	}
	return progs
}

// expectedOutput returns the text of the "// Output:" comment that ends
// src, as in a Go example: the last thing in main's body, so only closing
// braces may follow it.
func expectedOutput(src string) (string, bool) {
	lines := strings.Split(strings.TrimRight(src, "\n"), "\n")
	end := len(lines)
	for end > 0 && strings.TrimSpace(lines[end-1]) == "}" {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "// Output:" {
			var out []string
			for _, o := range lines[i+1 : end] {
				out = append(out, strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(o), "//"), " "))
			}
			return strings.Join(out, "\n"), true
		}
		if !strings.HasPrefix(l, "//") {
			return "", false
		}
	}
	return "", false
}

func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Skip("no go command to build the documentation's code with")
	}
	return p
}

func TestDocsCode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every program of the documentation")
	}
	goCmd := goTool(t)
	// The programs must be inside the module to import it; a directory
	// whose name starts with "_" is left out of ./... patterns.
	root, err := os.MkdirTemp(".", "_doctest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })

	var progs []*docProgram
	for _, f := range docFiles(t) {
		progs = append(progs, programs(t, root, goBlocks(t, f))...)
	}
	if len(progs) == 0 {
		t.Fatal("no Go blocks found in README.md and docs/")
	}
	var pkgs []string
	for _, p := range progs {
		if err := os.MkdirAll(p.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, src := range p.files {
			if err := os.WriteFile(filepath.Join(p.dir, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(p.dir))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := func(what string, dir string, name string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			return stdout.Bytes(), fmt.Errorf("%s: %v\n%s%s", what, err, stdout.Bytes(), stderr.Bytes())
		}
		return stdout.Bytes(), nil
	}
	// Vet every program at once; on failure, say which block it was.
	if _, err := run("go vet", ".", goCmd, append([]string{"vet"}, pkgs...)...); err != nil {
		t.Errorf("%v\n%s", err, blockIndex(progs))
	}
	bin := t.TempDir()
	var buildArgs []string
	if raceEnabled {
		buildArgs = append(buildArgs, "-race")
	}
	var mains []string
	for _, p := range progs {
		if p.main {
			mains = append(mains, "./"+filepath.ToSlash(p.dir))
		}
	}
	if len(mains) > 0 {
		args := append(append([]string{"build", "-o", bin + string(os.PathSeparator)}, buildArgs...), mains...)
		if _, err := run("go build", ".", goCmd, args...); err != nil {
			t.Fatalf("%v\n%s", err, blockIndex(progs))
		}
	}
	for _, p := range progs {
		where := fmt.Sprintf("%s:%d", p.from.doc, p.from.line)
		switch {
		case p.tests:
			args := append(append([]string{"test", "-count=1"}, buildArgs...), "./"+filepath.ToSlash(p.dir))
			if _, err := run("go test", ".", goCmd, args...); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		case p.main && !p.buildOnly:
			exe := filepath.Join(bin, filepath.Base(p.dir))
			out, err := run(exe, p.dir, exe)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if p.output != nil && strings.TrimSpace(string(out)) != strings.TrimSpace(*p.output) {
				t.Errorf("%s: the program printed\n%s\nwant (its // Output: comment)\n%s", where, out, *p.output)
			}
		case p.main:
			if p.output != nil {
				t.Errorf("%s: a build-only program cannot promise an // Output:", where)
			}
		}
	}
}

// blockIndex says which documentation block each directory came from.
func blockIndex(progs []*docProgram) string {
	var b strings.Builder
	for _, p := range progs {
		fmt.Fprintf(&b, "  %s is %s:%d\n", filepath.Base(p.dir), p.from.doc, p.from.line)
	}
	return b.String()
}

// prose returns Markdown text without its fenced code blocks and code
// spans, where brackets are code, not links.
func prose(md string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(codeSpan.ReplaceAllString(line, "") + "\n")
		}
	}
	return b.String()
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// mdLink is a Markdown link target that is not a URL.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks checks that every relative link in the Markdown files of
// the repository points at a file or directory that exists.
func TestDocsLinks(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*.md").Output()
	if err != nil {
		t.Skip("not a git checkout:", err)
	}
	for _, f := range strings.Fields(string(out)) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s: link to %s: %v", f, m[1], err)
			}
		}
	}
}

// planningWords are words of gotp's planning documents, which a user has
// never read: the docs name the system whose behaviour gotp follows.
var planningWords = regexp.MustCompile(`(?i:\bseeds? ?0\d\d|\bthe seeds?\b|\bseed's|\bseeds/)|TheSeed|WORKLOADS\.md|ANCHORS\.md|\.\./shared|/work/shared`)

// TestNoPlanningWords checks the repository's text for them.
func TestNoPlanningWords(t *testing.T) {
	out, err := exec.Command("git", "ls-files").Output()
	if err != nil {
		t.Skip("not a git checkout:", err)
	}
	exts := []string{".go", ".md", ".html", ".sh", ".py", ".exs", ".txt", ""}
	for _, f := range strings.Fields(string(out)) {
		if !slices.Contains(exts, filepath.Ext(f)) || strings.Contains(f, "testdata/") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a file deleted in the work tree
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := planningWords.FindString(line); m != "" && !strings.Contains(line, "planningWords") {
				t.Errorf("%s:%d: %q: name the system gotp follows (Erlang, Elixir, Wippy, RustStream), not our planning", f, i+1, m)
			}
		}
	}
}

// TestExpectedOutput checks how TestDocsCode reads an // Output: comment,
// since a mistake there would pass every program.
func TestExpectedOutput(t *testing.T) {
	for _, tc := range []struct {
		src, want string
		ok        bool
	}{
		{"func main() {\n\tfmt.Println(1)\n\t// Output:\n\t// 1\n}\n", "1", true},
		{"func main() {\n\t// Output:\n\t// a\n\t//\n\t// b\n}\n}\n", "a\n\nb", true},
		{"func main() {\n\t// Output:\n\t// 1\n\tfmt.Println(1)\n}\n", "", false},
		{"func main() {\n\tfmt.Println(1)\n}\n", "", false},
	} {
		got, ok := expectedOutput(tc.src)
		if got != tc.want || ok != tc.ok {
			t.Errorf("expectedOutput(%q) = %q, %v; want %q, %v", tc.src, got, ok, tc.want, tc.ok)
		}
	}
}
