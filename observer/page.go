package observer

import (
	"html/template"
	"net/http"
	"net/url"
)

type pageData struct {
	S         Snapshot
	Sort      string
	Filter    string
	AllowKill bool
	Token     string
	RefreshMS int64
	Partial   bool
}

// Query builds the query string of a link that keeps the token and filter.
func (d pageData) Query(sort string) template.URL {
	q := url.Values{}
	if sort != "" {
		q.Set("sort", sort)
	}
	if d.Filter != "" {
		q.Set("filter", d.Filter)
	}
	if d.Token != "" {
		q.Set("token", d.Token)
	}
	return template.URL("?" + q.Encode())
}

func (o *Observer) servePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s := o.snapshot(r.Context())
	d := pageData{
		Sort:      q.Get("sort"),
		Filter:    q.Get("filter"),
		AllowKill: o.opts.AllowKill,
		Token:     q.Get("token"),
		RefreshMS: o.opts.Refresh.Milliseconds(),
		Partial:   q.Get("partial") == "1",
	}
	s.Processes = sortProcesses(s.Processes, d.Sort, d.Filter)
	d.S = s
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	name := "page"
	if d.Partial {
		name = "content"
	}
	if err := pageTmpl.ExecuteTemplate(w, name, d); err != nil {
		o.n.Logger().Error("observer: render page", "err", err)
	}
}

var pageTmpl = template.Must(template.New("page").Parse(`
{{define "tree"}}
<li class="sup" data-pid="{{.PID}}"><b>{{if .Name}}{{.Name}} {{end}}{{.PID}}</b>
 <span class="meta">{{if .Dynamic}}dynamic{{else}}{{.Strategy}}{{end}}, intensity {{.Intensity}} in {{.Period}}, restarts {{.Restarts}}</span>
 <ul>{{range .Children}}
  <li class="child" data-id="{{.ID}}" data-pid="{{.PID}}">
   {{if .ID}}<b>{{.ID}}</b>{{else}}<i>dynamic</i>{{end}}
   <code>{{if .PID}}{{.PID}}{{else}}{{.State}}{{end}}</code>
   <span class="meta">{{.Type}}, {{.Restart}}, restarts {{.Restarts}}</span>
   {{if .Sub}}<ul>{{template "tree" .Sub}}</ul>{{end}}
  </li>{{end}}
 </ul>
</li>
{{end}}

{{define "content"}}
<p class="meta">node <b id="node">{{.S.Node}}</b> · {{len .S.Processes}} processes shown · {{.S.Time.Format "15:04:05"}}</p>

<h2>Supervision trees</h2>
{{if .S.Supervisors}}<ul class="trees" id="trees">{{range .S.Supervisors}}{{template "tree" .}}{{end}}</ul>
{{else}}<p class="meta">no supervisors</p>{{end}}

<h2>Processes</h2>
<form method="get" id="filter">
 <input name="filter" value="{{.Filter}}" placeholder="filter by pid, name, behaviour, status">
 <input type="hidden" name="sort" value="{{.Sort}}">
 {{if .Token}}<input type="hidden" name="token" value="{{.Token}}">{{end}}
</form>
<table id="processes">
<tr>
 <th><a href="{{.Query "pid"}}">PID</a></th><th><a href="{{.Query "name"}}">name</a></th>
 <th><a href="{{.Query "behaviour"}}">behaviour</a></th><th><a href="{{.Query "status"}}">status</a></th>
 <th><a href="{{.Query "mailbox"}}">mailbox</a></th><th><a href="{{.Query "handled"}}">handled</a></th>
 <th>links</th><th>monitors</th>{{if .AllowKill}}<th></th>{{end}}
</tr>
{{range .S.Processes}}<tr data-pid="{{.PID}}">
 <td><code>{{.PID}}</code></td><td>{{.Name}}</td><td>{{.Behaviour}}</td><td>{{.Status}}{{if .TrapExit}} (traps){{end}}</td>
 <td class="num">{{.MailboxLen}}{{if .MailboxMax}} / {{.MailboxMax}} {{.Overflow}}{{end}}{{if .Dropped}}, {{.Dropped}} dropped{{end}}</td><td class="num">{{.Handled}}</td>
 <td>{{range .Links}}<code>{{.}}</code> {{end}}</td><td>{{range .Monitors}}<code>{{.}}</code> {{end}}</td>
 {{if $.AllowKill}}<td><button class="kill" data-pid="{{.PID}}">kill</button></td>{{end}}
</tr>{{end}}
</table>

{{if .S.Registries}}<h2>Registries</h2>
<table id="registries"><tr><th>name</th><th>kind</th><th>partitions</th><th>entries</th><th>keys per partition</th></tr>
{{range .S.Registries}}<tr><td>{{.Name}}</td><td>{{.Kind}}</td><td class="num">{{.Partitions}}</td><td class="num">{{.Entries}}</td><td>{{range .Keys}}{{.}} {{end}}</td></tr>{{end}}
</table>{{end}}

{{if .S.Scopes}}<h2>Process groups</h2>
{{range .S.Scopes}}<h3>scope {{.ID}}</h3>
<table class="scope"><tr><th>group</th><th>size</th><th>members by node</th></tr>
{{range .Groups}}<tr><td>{{.Name}}</td><td class="num">{{.Size}}</td><td>{{range $node, $pids := .Members}}<b>{{$node}}</b>: {{range $pids}}<code>{{.}}</code> {{end}}<br>{{end}}</td></tr>{{end}}
</table>{{end}}{{end}}

{{if .S.Inboxes}}<h2>Inbox tables</h2>
<table id="inboxes"><tr><th>table</th><th>ready</th><th>in work</th><th>delayed</th><th>dead</th><th>invalid</th><th>outcomes</th><th>health</th></tr>
{{range .S.Inboxes}}<tr><td>{{.Name}}</td><td class="num">{{.Ready}}</td><td class="num">{{.InWork}}</td><td class="num">{{.Delayed}}</td><td class="num">{{.Dead}}</td><td class="num">{{if .Invalid}}<span class="err">{{.Invalid}}</span>{{else}}0{{end}}</td>
<td>{{range $k, $v := .Outcomes}}{{$k}}={{$v}} {{end}}{{if .Err}}<span class="err">{{.Err}}</span>{{end}}</td>
<td>{{with .Health}}{{if .Failing}}<span class="err">failing</span> {{end}}claim errors={{.ClaimErrors}} (permanent {{.PermanentErrors}}) locks lost={{.LocksLost}} bad rows={{.BadRows}}{{if .LastError}}<br><span class="err">{{.LastError}}</span> at {{.LastErrorAt.Format "15:04:05"}}{{end}}{{end}}</td></tr>{{end}}
</table>{{end}}

{{if .S.Cluster}}<h2>Cluster</h2>
<table id="cluster"><tr><th>node</th><th>state</th><th>last heartbeat</th><th>in</th><th>out</th></tr>
{{range .S.Cluster}}<tr><td>{{.Node}}</td><td>{{if .Up}}up{{else}}<span class="err">down</span>{{end}}</td><td>{{.LastHeartbeat.Format "15:04:05.000"}}</td><td class="num">{{.MessagesIn}}</td><td class="num">{{.MessagesOut}}</td></tr>{{end}}
</table>{{end}}
{{end}}

{{define "page"}}<!doctype html>
<html><head><meta charset="utf-8"><title>gotp observer · {{.S.Node}}</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
.num{text-align:right}.meta{color:#777}.err{color:#b00}code{font-size:12px}
ul.trees,ul.trees ul{list-style:none;padding-left:1.2em;border-left:1px dotted #aaa}
</style></head>
<body><h1>gotp observer</h1>
<div id="content">{{template "content" .}}</div>
<script>
(function(){
  var every = {{.RefreshMS}};
  var content = document.getElementById('content');
  function url(extra){ var u = new URL(location.href); u.searchParams.set('partial','1'); return u; }
  function refresh(){
    if (document.activeElement && document.activeElement.name === 'filter') return; // do not disturb typing
    fetch(url()).then(function(r){ return r.ok ? r.text() : null; }).then(function(html){
      if (html !== null) content.innerHTML = html;
    }).catch(function(){});
  }
  setInterval(refresh, every);
  content.addEventListener('click', function(e){
    var b = e.target.closest('button.kill');
    if (!b) return;
    var body = new URLSearchParams({pid: b.dataset.pid});
    var u = new URL('api/kill', location.href); u.search = '';
    var tok = new URL(location.href).searchParams.get('token');
    if (tok) u.searchParams.set('token', tok);
    fetch(u, {method: 'POST', body: body}).then(refresh);
  });
})();
</script>
</body></html>{{end}}
`))
