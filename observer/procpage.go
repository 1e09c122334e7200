package observer

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/internal/render"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// ProcessDetail is the process page: everything the observer can tell of
// one process. It is what api/process returns.
type ProcessDetail struct {
	PID   string `json:"pid"`
	Alive bool   `json:"alive"`
	Process
	Resident    bool     `json:"resident"`
	Handler     bool     `json:"handler"` // no goroutine while idle
	Uptime      string   `json:"uptime"`
	MonitoredBy []string `json:"monitored_by_pids,omitempty"` // zero PIDs (MonitorFunc watchers) left out
	// MailboxHead renders the first queued messages (see
	// gotp.Node.MailboxHead: a busy process's current burst is not
	// among them).
	MailboxHead []string `json:"mailbox_head,omitempty"`
	// State is the server's state as its behaviour shows it
	// (server.FormatState); StateErr why it could not be read.
	State    string `json:"state,omitempty"`
	StateErr string `json:"state_error,omitempty"`
	// Stack is the stack of a resident process's goroutine, when asked
	// for (?stack=1).
	Stack string `json:"stack,omitempty"`
	// Supervisor is the process's tree, when it is a supervisor.
	Supervisor *SupTree `json:"supervisor,omitempty"`
}

// Bounds of the process page.
const (
	headMessages = 10
	headLimit    = 300 // bytes per rendered message
	stateTimeout = time.Second
)

// detail gathers the process page of pid; with stack, the stack of a
// resident process too (a goroutine profile of the whole program: asked
// for, never refreshed).
func (o *Observer) detail(ctx context.Context, pid gotp.PID, stack bool) ProcessDetail {
	d := ProcessDetail{PID: pid.String()}
	in, ok := o.n.ProcessInfo(pid)
	if !ok {
		return d
	}
	d.Alive = true
	d.Process = processRow(in)
	d.Resident, d.Handler = in.Resident, in.Handler
	d.Uptime = time.Since(in.Started).Round(time.Millisecond).String()
	for _, m := range in.MonitoredBy {
		if !m.IsZero() {
			d.MonitoredBy = append(d.MonitoredBy, m.String())
		}
	}
	if head, ok := o.n.MailboxHead(pid, headMessages); ok {
		for _, m := range head {
			d.MailboxHead = append(d.MailboxHead, render.Value(m, headLimit))
		}
	}
	switch {
	case !strings.HasPrefix(in.Behaviour, "server "):
	case in.Status != gotp.StatusWaiting || in.MailboxLen > 0:
		// The question would wait behind the server's work, and count
		// against its mailbox limit: asked only of an idle server.
		d.StateErr = fmt.Sprintf("not asked: the server is busy (%s, %d messages waiting)", in.Status, in.MailboxLen)
	default:
		sctx, cancel := context.WithTimeout(ctx, stateTimeout)
		st, err := server.FormatState(sctx, o.n, pid)
		cancel()
		switch {
		case err == nil:
			d.State = st
		case errors.Is(err, context.DeadlineExceeded):
			d.StateErr = fmt.Sprintf("no answer within %v: the server is busy (%d messages queued before the question)", stateTimeout, in.MailboxLen)
		default:
			d.StateErr = err.Error()
		}
	}
	if in.Resident && stack {
		d.Stack, _ = o.n.ProcessStack(pid)
	}
	if t, ok := supervisor.Tree(o.n, pid); ok {
		st := o.supTree(t, "")
		d.Supervisor = &st
	}
	return d
}

type processPageData struct {
	base
	D         ProcessDetail
	AllowKill bool
	Err       string
}

func (o *Observer) serveProcessPage(w http.ResponseWriter, r *http.Request) {
	d := processPageData{base: o.base(r, "process"), AllowKill: o.killEnabled()}
	pid, err := gotp.ParsePID(r.URL.Query().Get("pid"))
	if err != nil {
		d.Err = err.Error()
		w.WriteHeader(http.StatusBadRequest)
	} else {
		d.Static = r.URL.Query().Get("stack") == "1" // a profile per refresh would cost too much
		d.D = o.detail(r.Context(), pid, d.Static)
		d.Title = pid.String() + " · gotp observer"
	}
	o.render(w, d.base, "process", d)
}

func (o *Observer) serveProcessJSON(w http.ResponseWriter, r *http.Request) {
	pid, err := gotp.ParsePID(r.URL.Query().Get("pid"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d := o.detail(r.Context(), pid, r.URL.Query().Get("stack") == "1")
	if !d.Alive {
		w.WriteHeader(http.StatusNotFound)
	}
	writeJSON(w, d)
}

const processPage = `
{{define "process-content"}}
{{if .Err}}<p class="err">{{.Err}}</p>
{{else if not .D.Alive}}<p class="err" id="gone">process {{.D.PID}} is not alive (it exited, or never ran on this node)</p>
{{else}}{{with .D}}
<h2>process <code id="pid">{{.PID}}</code>{{if .Name}} <b>{{.Name}}</b>{{end}}{{if .Label}} <span class="label">{{.Label}}</span>{{end}}</h2>
<dl class="kv" id="info">
 <dt>behaviour</dt><dd id="behaviour">{{.Behaviour}}</dd>
 <dt>status</dt><dd>{{.Status}}{{if .TrapExit}}, traps exits{{end}}</dd>
 <dt>kind</dt><dd>{{if .Resident}}resident handler (a goroutine for life){{else if .Handler}}handler (a goroutine only while it has messages){{else}}function process (a goroutine of its own){{end}}</dd>
 <dt>started</dt><dd>{{.Started.Format "2006-01-02 15:04:05.000"}} ({{.Uptime}} ago)</dd>
 <dt>messages handled</dt><dd id="handled">{{.Handled}}</dd>
 <dt>mailbox</dt><dd id="mailbox">{{.MailboxLen}}{{if .MailboxMax}} (limit {{.MailboxMax}}, {{.Overflow}}){{end}}{{if .Dropped}}, {{.Dropped}} dropped{{end}}</dd>
 <dt>links</dt><dd id="links">{{range .Links}}{{$.PID .}} {{else}}none{{end}}</dd>
 <dt>monitors</dt><dd id="monitors">{{range .Monitors}}{{$.PID .}} {{else}}none{{end}}</dd>
 <dt>monitored by</dt><dd>{{range .MonitoredBy}}{{$.PID .}} {{end}}{{if gt .Process.MonitoredBy (len .MonitoredBy)}}{{sub .Process.MonitoredBy (len .MonitoredBy)}} callbacks{{else if not .MonitoredBy}}none{{end}}</dd>
</dl>
{{if $.AllowKill}}<p><button class="kill" data-pid="{{.PID}}">kill</button></p>{{end}}
<h3>Mailbox head</h3>
{{if .MailboxHead}}<ol id="head">{{range .MailboxHead}}<li><code>{{.}}</code></li>{{end}}</ol>
{{if lt (len .MailboxHead) .MailboxLen}}<p class="meta">{{len .MailboxHead}} of {{.MailboxLen}} shown: the oldest queued; messages the process has already taken for its current burst are not shown.</p>{{end}}
{{else}}<p class="meta">{{if .MailboxLen}}the {{.MailboxLen}} waiting messages are in the process's current burst, which only it may read{{else}}empty{{end}}</p>{{end}}
{{if or .State .StateErr}}<h3>State</h3>
{{if .State}}<pre id="state">{{.State}}</pre>{{else}}<p class="err" id="state-error">{{.StateErr}}</p>{{end}}{{end}}
{{if .Stack}}<h3>Stack</h3><pre id="stack">{{.Stack}}</pre>
<p class="meta">as of {{$.Now}}; <a href="{{$.URL "process" "pid" .PID}}">back to the refreshing page</a></p>
{{else if .Resident}}<p><a id="show-stack" href="{{$.URL "process" "pid" .PID "stack" "1"}}">show its stack</a> <span class="meta">(a goroutine profile of the program; the page then stops refreshing)</span></p>{{end}}
{{if .Supervisor}}<h3>Children</h3>
<ul class="trees">{{template "tree" (subtree $.Base .Supervisor)}}</ul>{{end}}
{{end}}{{end}}
{{end}}

{{define "process"}}{{template "head" .Base}}{{template "process-content" .}}{{template "foot"}}{{end}}
`

// registryPageData is the registry page: one page of a registry's
// entries.
type registryPageData struct {
	base
	Name    string
	Filter  string
	Offset  int
	Limit   int
	Rows    []KeyRow
	Matched int
	Found   bool
}

// Prev and Next are the offsets of the neighbouring pages (-1: none).
func (d registryPageData) Prev() int {
	if d.Offset == 0 {
		return -1
	}
	return max(d.Offset-d.Limit, 0)
}

// Next returns the offset of the next page, or -1.
func (d registryPageData) Next() int {
	if d.Offset+d.Limit >= d.Matched {
		return -1
	}
	return d.Offset + d.Limit
}

// Page builds the link to the page at offset.
func (d registryPageData) Page(offset int) template.URL {
	return d.URL("registry", "name", d.Name, "filter", d.Filter, "offset", strconv.Itoa(offset))
}

func (o *Observer) serveRegistryPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := registryPageData{base: o.base(r, "registry · gotp observer"), Name: q.Get("name"), Filter: q.Get("filter"), Limit: o.opts.MaxRows}
	d.Offset, _ = strconv.Atoi(q.Get("offset"))
	d.Offset = max(d.Offset, 0)
	// Each source is asked in turn until one shows the registry (a
	// registry page needs no other source's work).
	var s Snapshot
	for _, src := range o.opts.Sources {
		if d.Found {
			break
		}
		src.Observe(r.Context(), &s)
		for _, reg := range s.Registries {
			if reg.Name == d.Name && reg.page != nil && !d.Found {
				d.Found = true
				d.Rows, d.Matched = reg.page(d.Filter, d.Offset, d.Limit)
			}
		}
		s = Snapshot{}
	}
	if !d.Found {
		w.WriteHeader(http.StatusNotFound)
	}
	d.Title = d.Name + " · gotp observer"
	o.render(w, d.base, "registry", d)
}

const registryPage = `
{{define "registry-content"}}
{{if not .Found}}<p class="err">no registry named {{printf "%q" .Name}}</p>{{else}}
<h2>registry {{.Name}}</h2>
<form method="get" id="keyfilter">
 <input type="hidden" name="name" value="{{.Name}}">
 <input name="filter" value="{{.Filter}}" placeholder="filter by key, pid, value">
 {{if .Token}}<input type="hidden" name="token" value="{{.Token}}">{{end}}
</form>
<p class="meta" id="range">{{if .Rows}}{{add .Offset 1}}–{{add .Offset (len .Rows)}} of {{.Matched}}{{else}}none of {{.Matched}}{{end}} entries{{if .Filter}} matching {{printf "%q" .Filter}}{{end}}
{{if ge .Prev 0}} · <a id="prev" href="{{.Page .Prev}}">previous</a>{{end}}{{if ge .Next 0}} · <a id="next" href="{{.Page .Next}}">next</a>{{end}}</p>
<table id="keys"><tr><th>key</th><th>process</th><th>value</th></tr>
{{range .Rows}}<tr><td><code>{{.Key}}</code></td><td>{{$.PID .PID}}</td><td><code>{{.Value}}</code></td></tr>{{end}}
</table>{{end}}
{{end}}

{{define "registry"}}{{template "head" .Base}}{{template "registry-content" .}}{{template "foot"}}{{end}}
`

// chart draws the history as three small line charts (processes,
// messages waiting, heap), each scaled to its own maximum, as inline SVG:
// no script, no external service. The svg carries the number of samples
// and the time of the last one, so that a test can see it move.
func chart(h []Sample) template.HTML {
	const w, rowH, gap = 360, 50, 18
	series := []struct {
		name  string
		color string
		val   func(Sample) float64
		unit  func(float64) string
	}{
		{"processes", "#1f77b4", func(s Sample) float64 { return float64(s.Processes) }, func(v float64) string { return strconv.Itoa(int(v)) }},
		{"messages waiting", "#d62728", func(s Sample) float64 { return float64(s.Messages) }, func(v float64) string { return strconv.Itoa(int(v)) }},
		{"heap", "#2ca02c", func(s Sample) float64 { return float64(s.HeapBytes) }, func(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }},
	}
	var b strings.Builder
	height := len(series) * (rowH + gap)
	last := ""
	if len(h) > 0 {
		last = h[len(h)-1].Time.Format(time.RFC3339Nano)
	}
	fmt.Fprintf(&b, `<svg class="chart" id="chart" width="%d" height="%d" data-samples="%d" data-last="%s" role="img" aria-label="system history">`,
		w, height, len(h), template.HTMLEscapeString(last))
	span := ""
	if len(h) > 1 {
		span = h[len(h)-1].Time.Sub(h[0].Time).Round(time.Second).String()
	}
	for i, s := range series {
		top := i*(rowH+gap) + gap
		peak := 0.0
		for _, x := range h {
			peak = max(peak, s.val(x))
		}
		cur := 0.0
		if len(h) > 0 {
			cur = s.val(h[len(h)-1])
		}
		fmt.Fprintf(&b, `<text x="4" y="%d" font-size="11" fill="#555">%s: %s (max %s, last %s)</text>`,
			top-4, s.name, s.unit(cur), s.unit(peak), span)
		fmt.Fprintf(&b, `<polyline class="series" data-series="%s" stroke="%s" points="`, template.HTMLEscapeString(s.name), s.color)
		for j, x := range h {
			px := 0.0
			if len(h) > 1 {
				px = float64(j) * float64(w-8) / float64(len(h)-1)
			}
			py := float64(rowH)
			if peak > 0 {
				py = float64(rowH) * (1 - s.val(x)/peak)
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", 4+px, float64(top)+py)
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
