package observer

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// base is what every page's template needs: the token to keep in links,
// and how often to refresh.
type base struct {
	Token     string
	RefreshMS int64
	Partial   bool
	Static    bool // the page does not refresh itself
	Title     string
}

// Now is the time of the page, for what it shows once.
func (b base) Now() string { return time.Now().Format("15:04:05") }

// Base returns b: what a template passes on to the shared templates.
func (b base) Base() base { return b }

// URL builds a link to path (relative to the observer) with the query
// kv (pairs; empty values left out) and the token.
func (b base) URL(path string, kv ...string) template.URL {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if b.Token != "" {
		q.Set("token", b.Token)
	}
	if len(q) == 0 {
		return template.URL(path)
	}
	return template.URL(path + "?" + q.Encode())
}

// PID links pid to its process page.
func (b base) PID(pid string) template.HTML {
	if pid == "" {
		return ""
	}
	return template.HTML(`<a class="pid" href="` + template.HTMLEscapeString(string(b.URL("process", "pid", pid))) + `"><code>` +
		template.HTMLEscapeString(pid) + `</code></a>`)
}

func (o *Observer) base(r *http.Request, title string) base {
	q := r.URL.Query()
	return base{
		Token:     q.Get("token"),
		RefreshMS: o.opts.Refresh.Milliseconds(),
		Partial:   q.Get("partial") == "1",
		Title:     title,
	}
}

// render writes the page template name of d, or its content alone for a
// refresh (?partial=1).
func (o *Observer) render(w http.ResponseWriter, b base, name string, d any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if b.Partial {
		name += "-content"
	}
	if err := pages.ExecuteTemplate(w, name, d); err != nil {
		o.n.Logger().Error("observer: render page", "page", name, "err", err)
	}
}

type pageData struct {
	base
	S         Snapshot
	Sort      string
	Filter    string
	AllowKill bool
	MaxRows   int
}

// Sorted builds the query of a column's sort link, keeping the filter.
func (d pageData) Sorted(key string) template.URL { return d.URL("", "sort", key, "filter", d.Filter) }

func (o *Observer) servePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := pageData{
		base:      o.base(r, "gotp observer · "+o.n.Name()),
		Sort:      q.Get("sort"),
		Filter:    q.Get("filter"),
		AllowKill: o.killEnabled(),
		MaxRows:   o.opts.MaxRows,
	}
	s := o.snapshot(r.Context(), true, nil)
	s.Processes, s.ProcessesShown = o.rows(s.Processes, d.Sort, d.Filter)
	for i := range s.Scopes {
		if len(s.Scopes[i].Groups) > o.opts.MaxRows {
			s.Scopes[i].Groups = s.Scopes[i].Groups[:o.opts.MaxRows]
		}
	}
	d.S = s
	o.render(w, d.base, "main", d)
}

// treeNode is a supervisor tree as the "tree" template draws it, with
// what links need.
type treeNode struct {
	Root base
	SupTree
}

// Template helpers.
var funcs = template.FuncMap{
	"bytes": func(b uint64) string {
		switch {
		case b >= 1<<30:
			return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
		case b >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
		case b >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
		}
		return strconv.FormatUint(b, 10) + " B"
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return time.Since(t).Round(time.Second).String()
	},
	"chart":      chart,
	"tree":       func(b base, t SupTree) treeNode { return treeNode{Root: b, SupTree: t} },
	"subtree":    func(b base, t *SupTree) treeNode { return treeNode{Root: b, SupTree: *t} },
	"join":       strings.Join,
	"add":        func(a, b int) int { return a + b },
	"sub":        func(a, b int) int { return a - b },
	"jobButtons": jobButtons,
}

var pages = template.Must(template.New("pages").Funcs(funcs).Parse(layout + mainPage + processPage + registryPage + inboxPages))

// layout: the head, the style and the script every page shares. The
// script refreshes #content from the same URL with partial=1 (not while
// the user types in a filter), and sends the kill action as JSON.
const layout = `
{{define "head"}}<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
.num{text-align:right}.meta{color:#777}.err{color:#b00}code{font-size:12px}a.pid{text-decoration:none}
ul.trees,ul.trees ul{list-style:none;padding-left:1.2em;border-left:1px dotted #aaa}
pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em;font-size:12px}
dl.kv{display:grid;grid-template-columns:max-content auto;gap:2px 1em}dl.kv dt{color:#777}dl.kv dd{margin:0}
svg.chart{background:#fafafa;border:1px solid #eee}svg.chart polyline{fill:none;stroke-width:1.5}
.sys{display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start}
</style></head>
<body><h1><a href="{{.URL "./"}}">gotp observer</a></h1>
<p class="meta"><a href="{{.URL "api/snapshot"}}">JSON</a> · <a href="{{.URL "metrics"}}">metrics</a></p>
<p id="action-result" class="meta" role="status"></p>
<div id="content" data-refresh="{{.RefreshMS}}"{{if .Static}} data-static{{end}}>{{end}}

{{define "foot"}}</div>
<script>
(function(){
  var content = document.getElementById('content');
  var every = Number(content.dataset.refresh) || 2000;
  function refresh(){
    var a = document.activeElement;
    if (a && a.tagName === 'INPUT') return; // do not disturb typing
    var u = new URL(location.href); u.searchParams.set('partial', '1');
    fetch(u).then(function(r){ return r.ok ? r.text() : null; }).then(function(html){
      if (html !== null) content.innerHTML = html;
    }).catch(function(){});
  }
  if (!content.hasAttribute('data-static')) setInterval(refresh, every);
  var result = document.getElementById('action-result');
  function post(path, body){
    var u = new URL(path, location.href); u.search = '';
    var tok = new URL(location.href).searchParams.get('token');
    if (tok) u.searchParams.set('token', tok);
    return fetch(u, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)}).then(function(r){
      return r.text().then(function(t){
        result.textContent = r.ok ? '' : t;
        result.className = r.ok ? 'meta' : 'err';
        if (r.ok && body.id) result.textContent = body.action + ': job ' + body.id + ' done';
      });
    }).then(refresh);
  }
  content.addEventListener('click', function(e){
    var b = e.target.closest('button.kill');
    if (b) { post('api/kill', {pid: b.dataset.pid}); return; }
    b = e.target.closest('button.job');
    if (b) post('api/inbox/' + b.dataset.action, {table: b.dataset.table, id: Number(b.dataset.id), action: b.dataset.action});
  });
})();
</script>
</body></html>{{end}}
`

const mainPage = `
{{define "tree"}}
<li class="sup" data-pid="{{.PID}}"><b>{{if .Name}}{{.Name}} {{end}}</b>{{$.Root.PID .PID}}
 <span class="meta">{{if .Dynamic}}dynamic{{else}}{{.Strategy}}{{end}}, intensity {{.Intensity}} in {{.Period}}, restarts {{.Restarts}}</span>
 <ul>{{range .Children}}
  <li class="child" data-id="{{.ID}}" data-pid="{{.PID}}">
   {{if .ID}}<b>{{.ID}}</b>{{else if .Label}}<b class="label">{{.Label}}</b>{{else if .Name}}<b>{{.Name}}</b>{{else}}<i>dynamic</i>{{end}}
   {{if .PID}}{{$.Root.PID .PID}}{{else}}<code>{{.State}}</code>{{end}}
   <span class="meta">{{if and .ID .Label}}{{.Label}}, {{end}}{{.Type}}, {{.Restart}}, restarts {{.Restarts}}</span>
   {{if .Sub}}<ul>{{template "tree" (subtree $.Root .Sub)}}</ul>{{end}}
  </li>{{end}}
 </ul>
</li>
{{end}}

{{define "system"}}
<h2>System</h2>
<div class="sys" id="system">
<dl class="kv">
 <dt>node</dt><dd id="node">{{.Node}}</dd>
 <dt>uptime</dt><dd>{{.Uptime}}</dd>
 <dt>processes</dt><dd id="sys-processes">{{.Processes}}</dd>
 <dt>messages waiting</dt><dd>{{.Messages}}{{if .LongestPID}} (longest mailbox {{.Longest}}){{end}}</dd>
 <dt>crashes</dt><dd>{{.Crashes}}</dd>
 <dt>goroutines</dt><dd>{{.Goroutines}}</dd>
 <dt>heap</dt><dd>{{bytes .HeapBytes}}</dd>
 <dt>memory mapped</dt><dd>{{bytes .TotalBytes}}</dd>
 <dt>GC cycles</dt><dd>{{.GCCycles}}</dd>
 <dt>GOMAXPROCS</dt><dd>{{.GOMAXPROCS}}</dd>
 <dt>Go</dt><dd>{{.GoVersion}}</dd>
</dl>
{{chart .History}}
</div>
{{end}}

{{define "main-content"}}
<p class="meta">node <b>{{.S.Node}}</b> · {{.S.Time.Format "15:04:05"}}</p>
{{template "system" .S.System}}

<h2>Supervision trees</h2>
{{if .S.Supervisors}}<ul class="trees" id="trees">{{range .S.Supervisors}}{{template "tree" (tree $.Base .)}}{{end}}</ul>
{{else}}<p class="meta">no supervisors</p>{{end}}

<h2>Processes</h2>
<form method="get" id="filter">
 <input name="filter" value="{{.Filter}}" placeholder="filter by pid, name, label, behaviour, status">
 <input type="hidden" name="sort" value="{{.Sort}}">
 {{if .Token}}<input type="hidden" name="token" value="{{.Token}}">{{end}}
</form>
<p class="meta" id="shown">{{len .S.Processes}} of {{.S.ProcessesShown}} matching ({{.S.ProcessCount}} processes){{if lt (len .S.Processes) .S.ProcessesShown}}: filter to see the others{{end}}</p>
<table id="processes">
<tr>
 <th><a href="{{.Sorted "pid"}}">PID</a></th><th><a href="{{.Sorted "name"}}">name / label</a></th>
 <th><a href="{{.Sorted "behaviour"}}">behaviour</a></th><th><a href="{{.Sorted "status"}}">status</a></th>
 <th><a href="{{.Sorted "mailbox"}}">mailbox</a></th><th><a href="{{.Sorted "handled"}}">handled</a></th>
 <th>links</th><th>monitors</th>{{if .AllowKill}}<th></th>{{end}}
</tr>
{{range .S.Processes}}<tr data-pid="{{.PID}}">
 <td>{{$.PID .PID}}</td><td>{{.Name}}{{if and .Name .Label}} · {{end}}{{if .Label}}<span class="label">{{.Label}}</span>{{end}}</td><td>{{.Behaviour}}</td><td>{{.Status}}{{if .TrapExit}} (traps){{end}}</td>
 <td class="num">{{.MailboxLen}}{{if .MailboxMax}} / {{.MailboxMax}} {{.Overflow}}{{end}}{{if .Dropped}}, {{.Dropped}} dropped{{end}}</td><td class="num">{{.Handled}}</td>
 <td>{{range .Links}}{{$.PID .}} {{end}}</td><td>{{range .Monitors}}{{$.PID .}} {{end}}</td>
 {{if $.AllowKill}}<td><button class="kill" data-pid="{{.PID}}">kill</button></td>{{end}}
</tr>{{end}}
</table>

{{if .S.Registries}}<h2>Registries</h2>
<table id="registries"><tr><th>name</th><th>kind</th><th>partitions</th><th>entries</th><th>keys per partition</th><th></th></tr>
{{range .S.Registries}}<tr><td>{{.Name}}</td><td>{{.Kind}}</td><td class="num">{{.Partitions}}</td><td class="num">{{.Entries}}</td><td>{{range .Keys}}{{.}} {{end}}</td>
<td><a class="keys" href="{{$.URL "registry" "name" .Name}}">keys</a></td></tr>{{end}}
</table>{{end}}

{{if .S.Scopes}}<h2>Process groups</h2>
{{range .S.Scopes}}<h3>scope {{.ID}}</h3>
<p class="meta">{{.GroupCount}} groups, {{.Memberships}} memberships{{if lt (len .Groups) .GroupCount}}; the {{len .Groups}} largest:{{end}}</p>
<table class="scope"><tr><th>group</th><th>size</th><th>members by node</th></tr>
{{range .Groups}}<tr><td>{{.Name}}</td><td class="num">{{.Size}}</td><td>{{range $node, $pids := .Members}}<b>{{$node}}</b>: {{range $pids}}{{$.PID .}} {{end}}<br>{{end}}</td></tr>{{end}}
</table>{{end}}{{end}}

{{if .S.Inboxes}}<h2>Inbox tables</h2>
<table id="inboxes"><tr><th>table</th><th>ready</th><th>in work</th><th>delayed</th><th>dead</th><th>invalid</th><th>outcomes</th><th>health</th></tr>
{{range .S.Inboxes}}<tr>{{if .Jobs}}{{$t := .Name}}<td><a class="inbox" href="{{$.URL "inbox" "table" .Name}}">{{.Name}}</a></td>
<td class="num"><a href="{{$.URL "inbox" "table" $t "state" "ready"}}">{{.Ready}}</a></td><td class="num"><a href="{{$.URL "inbox" "table" $t "state" "in_work"}}">{{.InWork}}</a></td>
<td class="num"><a href="{{$.URL "inbox" "table" $t "state" "delayed"}}">{{.Delayed}}</a></td><td class="num"><a href="{{$.URL "inbox" "table" $t "state" "dead"}}">{{.Dead}}</a></td>
{{else}}<td>{{.Name}}</td><td class="num">{{.Ready}}</td><td class="num">{{.InWork}}</td><td class="num">{{.Delayed}}</td><td class="num">{{.Dead}}</td>{{end}}<td class="num">{{if .Invalid}}<span class="err">{{.Invalid}}</span>{{else}}0{{end}}</td>
<td>{{range $k, $v := .Outcomes}}{{$k}}={{$v}} {{end}}{{if .Err}}<span class="err">{{.Err}}</span>{{end}}</td>
<td>{{with .Health}}{{if .Failing}}<span class="err">failing</span> {{end}}claim errors={{.ClaimErrors}} (permanent {{.PermanentErrors}}) locks lost={{.LocksLost}} bad rows={{.BadRows}}{{if .LastError}}<br><span class="err">{{.LastError}}</span> at {{.LastErrorAt.Format "15:04:05"}}{{end}}{{end}}</td></tr>{{end}}
</table>{{end}}

{{if .S.Cluster}}<h2>Cluster</h2>
<table id="cluster"><tr><th>node</th><th>state</th><th>last heartbeat</th><th>messages in</th><th>messages out</th><th>pending</th></tr>
{{range .S.Cluster}}<tr data-node="{{.Node}}"><td>{{.Node}}{{if .Self}} (this node, totals){{end}}</td>
<td>{{if .Refused}}<span class="err">refused: {{.Refused}}</span>{{else if .Up}}up{{else}}<span class="err">down</span>{{end}}</td>
<td>{{if not .LastHeartbeat.IsZero}}{{.LastHeartbeat.Format "15:04:05.000"}}{{end}}</td><td class="num">{{.MessagesIn}}</td><td class="num">{{.MessagesOut}}</td><td class="num">{{.Pending}}</td></tr>{{end}}
</table>{{end}}
{{end}}

{{define "main"}}{{template "head" .Base}}{{template "main-content" .}}{{template "foot"}}{{end}}
`
