package observer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gotp/gotp/inbox"
)

// inboxJobs is what the job pages need of an inbox table: every
// *inbox.Queue[T] has it.
type inboxJobs interface {
	Jobs(ctx context.Context, o inbox.ListOptions) ([]inbox.JobRecord, error)
	Job(ctx context.Context, id int64) (inbox.JobRecord, error)
	RetryJob(ctx context.Context, id int64) error
	DeleteJob(ctx context.Context, id int64) error
}

// inboxCanceler is implemented by inbox tables that can cancel a job.
type inboxCanceler interface {
	Cancel(ctx context.Context, id int64) error
}

// tableFinder is implemented by the sources InboxSource makes.
type tableFinder interface {
	inboxTable(name string) (inboxStats, bool)
}

// RequestError is the answer to a request whose parameters the observer
// cannot read: a job id that is not a positive integer, an unknown state,
// a body that is not the JSON an action takes. It is served as 400.
type RequestError struct {
	Param  string // the query parameter or body field
	Value  string // what was sent, cut to 100 bytes
	Reason string
}

// Error describes the failure.
func (e *RequestError) Error() string {
	return fmt.Sprintf("observer: %s %q: %s", e.Param, e.Value, e.Reason)
}

func badParam(param, value, reason string) *RequestError {
	if len(value) > 100 {
		value = value[:100]
	}
	return &RequestError{Param: param, Value: value, Reason: reason}
}

// parseJobID reads a job id: a positive decimal integer.
func parseJobID(param, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || s[0] == '+' {
		return 0, badParam(param, s, "not a job id (a positive integer)")
	}
	return id, nil
}

// jobListQuery is what a job list asks for.
type jobListQuery struct {
	Table string
	State inbox.JobState // "" for every state
	After int64
}

// parseJobList reads the query of a job list: table (required), state
// (optional: one of inbox.JobState's names, or "all"), after (optional: the
// last id of the previous page, 0 for the first).
func parseJobList(v url.Values) (jobListQuery, error) {
	q := jobListQuery{Table: v.Get("table")}
	if q.Table == "" {
		return q, badParam("table", "", "required")
	}
	if s := v.Get("state"); s != "" && s != "all" {
		st, err := inbox.ParseJobState(s)
		if err != nil {
			return q, badParam("state", s, "not a job state (ready, in_work, delayed, dead, processed, invalid, cancelled, all)")
		}
		q.State = st
	}
	if s := v.Get("after"); s != "" {
		after, err := strconv.ParseInt(s, 10, 64)
		if err != nil || after < 0 {
			return q, badParam("after", s, "not a job id (a non-negative integer)")
		}
		q.After = after
	}
	return q, nil
}

// maxActionBody bounds the body of a job action.
const maxActionBody = 1 << 10

// parseJobAction reads the body of a job action: {"table": "...", "id": n}.
func parseJobAction(body io.Reader) (table string, id int64, err error) {
	var req struct {
		Table *string          `json:"table"`
		ID    *json.RawMessage `json:"id"`
	}
	dec := json.NewDecoder(io.LimitReader(body, maxActionBody))
	if err := dec.Decode(&req); err != nil {
		return "", 0, badParam("body", "", "not a JSON object {\"table\": ..., \"id\": ...}: "+err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		// Another value after the object: which one was meant?
		return "", 0, badParam("body", "", "more than one JSON value: send one object {\"table\": ..., \"id\": ...}")
	}
	if req.Table == nil || *req.Table == "" {
		return "", 0, badParam("table", "", "required")
	}
	if req.ID == nil {
		return "", 0, badParam("id", "", "required")
	}
	raw := string(*req.ID)
	if s, err := strconv.Unquote(raw); err == nil {
		raw = s // "5" as well as 5
	}
	id, err = parseJobID("id", raw)
	if err != nil {
		return "", 0, err
	}
	return *req.Table, id, nil
}

// findInbox returns the inbox table named name from the sources.
func (o *Observer) findInbox(name string) (inboxStats, inboxJobs, bool) {
	for _, src := range o.opts.Sources {
		if f, ok := src.(tableFinder); ok {
			if q, ok := f.inboxTable(name); ok {
				jobs, ok := q.(inboxJobs)
				return q, jobs, ok
			}
		}
	}
	return nil, nil, false
}

// jobStatus maps a job operation's error onto an HTTP status.
func jobStatus(err error) int {
	var re *RequestError
	var ce *inbox.ConfigError
	var se *inbox.JobStateError
	switch {
	case errors.As(err, &re), errors.As(err, &ce):
		return http.StatusBadRequest
	case errors.Is(err, inbox.ErrNoJob), errors.Is(err, errNoTable):
		return http.StatusNotFound
	case errors.As(err, &se):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// errNoTable is the answer for a table no source shows.
var errNoTable = errors.New("observer: no such inbox table")

func noTable(name string) error { return fmt.Errorf("%w: %q", errNoTable, name) }

// MaxPayloadShown bounds the payload a job's page (and api/inbox/job) shows:
// a longer one is cut to it (PayloadCut), so that a huge payload does not make
// a huge page. PayloadSize is still its full length.
const MaxPayloadShown = 64 << 10

// InboxJob is one job as the observer shows it.
type InboxJob struct {
	ID          int64     `json:"id"`
	State       string    `json:"state"`
	Attempts    int       `json:"attempts"`
	Priority    int       `json:"priority"`
	LockedUntil time.Time `json:"locked_until,omitzero"`
	ClaimedAt   time.Time `json:"claimed_at,omitzero"`
	DeadAt      time.Time `json:"dead_at,omitzero"`
	CreatedAt   time.Time `json:"created_at,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	Trace       string    `json:"trace,omitempty"`
	// Payload is the stored payload: as text when it is valid UTF-8,
	// otherwise base64 (PayloadEncoding "base64"). In a list it is cut to
	// inbox.ListPayloadLimit bytes, on a job's page to MaxPayloadShown
	// (PayloadCut); PayloadSize is its length.
	Payload         string `json:"payload"`
	PayloadEncoding string `json:"payload_encoding,omitempty"`
	PayloadSize     int    `json:"payload_size"`
	PayloadCut      bool   `json:"payload_cut,omitempty"`
}

func inboxJob(j inbox.JobRecord) InboxJob {
	v := InboxJob{
		ID: j.ID, State: string(j.State), Attempts: j.Attempts, Priority: j.Priority,
		LockedUntil: j.LockedUntil, ClaimedAt: j.ClaimedAt, DeadAt: j.DeadAt, CreatedAt: j.CreatedAt,
		LastError: j.LastError, Trace: j.Trace,
		PayloadSize: j.PayloadSize, PayloadCut: len(j.Payload) < j.PayloadSize,
	}
	p := j.Payload
	if v.PayloadCut {
		for len(p) > 0 && !utf8.Valid(p) && len(j.Payload)-len(p) < utf8.UTFMax {
			p = p[:len(p)-1] // a rune the cut split
		}
	}
	if utf8.Valid(p) {
		v.Payload = string(p)
	} else {
		v.Payload, v.PayloadEncoding = base64.StdEncoding.EncodeToString(j.Payload), "base64"
	}
	return v
}

// InboxJobs is one page of an inbox table's jobs.
type InboxJobs struct {
	Table string `json:"table"`
	State string `json:"state"` // "" for every state
	After int64  `json:"after"`
	// Next is the after of the next page, 0 on the last.
	Next   int64            `json:"next"`
	Jobs   []InboxJob       `json:"jobs"`
	Counts map[string]int64 `json:"counts,omitempty"` // jobs by state (inbox.Stats)
	Err    string           `json:"error,omitempty"`  // why Counts is missing
	Cancel bool             `json:"cancel"`           // the table can cancel jobs
}

// jobsPage reads the page of jobs the request asks for.
func (o *Observer) jobsPage(r *http.Request) (InboxJobs, error) {
	lq, err := parseJobList(r.URL.Query())
	if err != nil {
		return InboxJobs{}, err
	}
	stats, jobs, ok := o.findInbox(lq.Table)
	if !ok {
		return InboxJobs{}, noTable(lq.Table)
	}
	p := InboxJobs{Table: lq.Table, State: string(lq.State), After: lq.After}
	_, p.Cancel = stats.(inboxCanceler)
	limit := min(o.opts.MaxRows, inbox.MaxListLimit)
	list, err := jobs.Jobs(r.Context(), inbox.ListOptions{State: lq.State, AfterID: lq.After, Limit: limit})
	if err != nil {
		return InboxJobs{}, err
	}
	p.Jobs = make([]InboxJob, len(list))
	for i, j := range list {
		p.Jobs[i] = inboxJob(j)
	}
	if len(list) == limit {
		p.Next = list[len(list)-1].ID
	}
	if st, err := stats.Stats(r.Context()); err != nil {
		p.Err = err.Error()
	} else {
		p.Counts = map[string]int64{"ready": st.Ready, "in_work": st.InWork, "delayed": st.Delayed, "dead": st.Dead,
			"processed": st.Processed, "invalid": st.Invalid, "cancelled": st.Cancelled}
	}
	return p, nil
}

// jobDetail reads the job the request names.
func (o *Observer) jobDetail(r *http.Request) (string, InboxJob, bool, error) {
	v := r.URL.Query()
	table := v.Get("table")
	if table == "" {
		return "", InboxJob{}, false, badParam("table", "", "required")
	}
	id, err := parseJobID("id", v.Get("id"))
	if err != nil {
		return table, InboxJob{}, false, err
	}
	stats, jobs, ok := o.findInbox(table)
	if !ok {
		return table, InboxJob{}, false, noTable(table)
	}
	_, cancel := stats.(inboxCanceler)
	j, err := jobs.Job(r.Context(), id)
	if err != nil {
		return table, InboxJob{}, cancel, err
	}
	if len(j.Payload) > MaxPayloadShown {
		j.Payload = j.Payload[:MaxPayloadShown:MaxPayloadShown]
	}
	return table, inboxJob(j), cancel, nil
}

func (o *Observer) serveJobsJSON(w http.ResponseWriter, r *http.Request) {
	p, err := o.jobsPage(r)
	if err != nil {
		http.Error(w, err.Error(), jobStatus(err))
		return
	}
	writeJSON(w, p)
}

func (o *Observer) serveJobJSON(w http.ResponseWriter, r *http.Request) {
	_, j, _, err := o.jobDetail(r)
	if err != nil {
		http.Error(w, err.Error(), jobStatus(err))
		return
	}
	writeJSON(w, j)
}

// serveJobAction runs a job action (retry, delete, cancel): POST, JSON body
// {"table": "...", "id": n}, behind the same guards as the kill
// (allowAction).
func (o *Observer) serveJobAction(w http.ResponseWriter, r *http.Request, action string) {
	if !o.allowAction(w, r, action) {
		return
	}
	table, id, err := parseJobAction(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	stats, jobs, ok := o.findInbox(table)
	if !ok {
		err := noTable(table)
		http.Error(w, err.Error(), jobStatus(err))
		return
	}
	switch action {
	case "retry":
		err = jobs.RetryJob(r.Context(), id)
	case "delete":
		err = jobs.DeleteJob(r.Context(), id)
	case "cancel":
		c, ok := stats.(inboxCanceler)
		if !ok {
			http.Error(w, "observer: inbox table "+strconv.Quote(table)+" cannot cancel jobs", http.StatusNotImplemented)
			return
		}
		err = c.Cancel(r.Context(), id)
		var ce *inbox.ConfigError
		if errors.As(err, &ce) { // the table cannot cancel (no CancelledAt column)
			http.Error(w, err.Error(), http.StatusNotImplemented)
			return
		}
	}
	if err != nil {
		http.Error(w, err.Error(), jobStatus(err))
		return
	}
	o.n.Logger().Warn("observer: job action on request", "action", action, "table", table, "id", id, "remote", r.RemoteAddr)
	writeJSON(w, map[string]any{"table": table, "id": id, "done": action})
}

// jobsPageData is the inbox page: one page of a table's jobs.
type jobsPageData struct {
	base
	InboxJobs
	Error   string
	Actions bool
}

// States are the tabs of the page, with their counts.
func (d jobsPageData) States() []string {
	return []string{"ready", "in_work", "delayed", "dead", "cancelled", "processed", "invalid", "all"}
}

// List links to the list of state st of the page's table, from its start.
func (d jobsPageData) List(st string) template.URL {
	return d.URL("inbox", "table", d.Table, "state", st)
}

// NextPage links to the next page.
func (d jobsPageData) NextPage() template.URL {
	return d.URL("inbox", "table", d.Table, "state", d.State, "after", strconv.FormatInt(d.Next, 10))
}

// JobURL links to a job's page.
func (d jobsPageData) JobURL(id int64) template.URL {
	return d.URL("job", "table", d.Table, "id", strconv.FormatInt(id, 10))
}

func (o *Observer) serveInboxPage(w http.ResponseWriter, r *http.Request) {
	d := jobsPageData{base: o.base(r, "inbox · gotp observer"), Actions: o.killEnabled()}
	p, err := o.jobsPage(r)
	if err != nil {
		w.WriteHeader(jobStatus(err))
		d.Error = err.Error()
		d.Table = r.URL.Query().Get("table")
	} else {
		d.InboxJobs = p
		d.Title = p.Table + " · inbox · gotp observer"
	}
	o.render(w, d.base, "inbox", d)
}

// jobPageData is the page of one job.
type jobPageData struct {
	base
	Table   string
	Job     InboxJob
	Error   string
	Actions bool
	Cancel  bool
}

// List links back to the table's list of the job's state.
func (d jobPageData) List() template.URL {
	return d.URL("inbox", "table", d.Table, "state", d.Job.State)
}

func (o *Observer) serveJobPage(w http.ResponseWriter, r *http.Request) {
	d := jobPageData{base: o.base(r, "job · gotp observer"), Actions: o.killEnabled()}
	table, j, cancel, err := o.jobDetail(r)
	d.Table, d.Cancel = table, cancel
	if err != nil {
		w.WriteHeader(jobStatus(err))
		d.Error = err.Error()
	} else {
		d.Job = j
		d.Title = fmt.Sprintf("job %d · %s · gotp observer", j.ID, table)
	}
	o.render(w, d.base, "job", d)
}

// The job pages. A job's buttons carry its table and id; the layout's
// script posts them as JSON to api/inbox/<action>.
const inboxPages = `
{{define "job-buttons"}}{{if .Actions}}{{$s := .Job.State}}
 {{if or (eq $s "delayed") (eq $s "dead") (eq $s "cancelled")}}<button class="job" data-action="retry" data-table="{{.Table}}" data-id="{{.Job.ID}}">retry</button>{{end}}
 {{if and .Cancel (or (eq $s "ready") (eq $s "delayed") (eq $s "in_work"))}}<button class="job" data-action="cancel" data-table="{{.Table}}" data-id="{{.Job.ID}}">cancel</button>{{end}}
 {{if ne $s "in_work"}}<button class="job" data-action="delete" data-table="{{.Table}}" data-id="{{.Job.ID}}">delete</button>{{end}}
{{end}}{{end}}

{{define "inbox-content"}}
{{if .Error}}<p class="err" id="error">{{.Error}}</p>{{else}}
<h2>inbox table {{.Table}}</h2>
<p id="states">{{range .States}}{{if eq . (or $.State "all")}}<b>{{.}}</b>{{else}}<a class="state" data-state="{{.}}" href="{{$.List .}}">{{.}}</a>{{end}}{{with index $.Counts .}} ({{.}}){{end}} · {{end}}</p>
{{if .Err}}<p class="err">{{.Err}}</p>{{end}}
<p class="meta" id="range">{{len .Jobs}} jobs{{if .After}} after id {{.After}} · <a id="first" href="{{.List (or .State "all")}}">first page</a>{{end}}{{if .Next}} · <a id="next" href="{{.NextPage}}">next</a>{{end}}</p>
<table id="jobs"><tr><th>id</th><th>state</th><th>attempts</th><th>priority</th><th>locked until</th><th>claimed</th><th>last error</th><th>payload</th>{{if .Actions}}<th></th>{{end}}</tr>
{{range .Jobs}}<tr data-id="{{.ID}}"><td><a class="job" href="{{$.JobURL .ID}}">{{.ID}}</a></td><td>{{.State}}</td><td class="num">{{.Attempts}}</td><td class="num">{{.Priority}}</td>
<td>{{if not .LockedUntil.IsZero}}{{.LockedUntil.Format "2006-01-02 15:04:05.000"}}{{end}}</td><td>{{if not .ClaimedAt.IsZero}}{{.ClaimedAt.Format "15:04:05.000"}}{{end}}</td>
<td class="err">{{.LastError}}</td><td><code>{{if .PayloadEncoding}}({{.PayloadSize}} bytes, not text){{else}}{{.Payload}}{{if .PayloadCut}}…{{end}}{{end}}</code></td>
{{if $.Actions}}<td>{{template "job-buttons" (jobButtons $ .)}}</td>{{end}}</tr>{{end}}
</table>{{end}}
{{end}}

{{define "inbox"}}{{template "head" .Base}}{{template "inbox-content" .}}{{template "foot"}}{{end}}

{{define "job-content"}}
{{if .Error}}<p class="err" id="error">{{.Error}}</p>{{else}}{{with .Job}}
<h2>job {{.ID}} of <a href="{{$.List}}">{{$.Table}}</a></h2>
<dl class="kv" id="job">
 <dt>state</dt><dd id="state">{{.State}}</dd>
 <dt>attempts</dt><dd>{{.Attempts}}</dd>
 <dt>priority</dt><dd>{{.Priority}}</dd>
 <dt>locked until</dt><dd>{{if not .LockedUntil.IsZero}}{{.LockedUntil.Format "2006-01-02 15:04:05.000000 MST"}}{{end}}</dd>
 <dt>claimed at</dt><dd>{{if not .ClaimedAt.IsZero}}{{.ClaimedAt.Format "2006-01-02 15:04:05.000000 MST"}}{{end}}</dd>
 <dt>dead at</dt><dd>{{if not .DeadAt.IsZero}}{{.DeadAt.Format "2006-01-02 15:04:05.000000 MST"}}{{end}}</dd>
 <dt>created at</dt><dd>{{if not .CreatedAt.IsZero}}{{.CreatedAt.Format "2006-01-02 15:04:05.000000 MST"}}{{end}}</dd>
 {{if .Trace}}<dt>trace</dt><dd><code id="trace">{{.Trace}}</code></dd>{{end}}
 <dt>payload</dt><dd>{{.PayloadSize}} bytes{{if .PayloadEncoding}}, not text: base64{{end}}</dd>
</dl>
<p>{{template "job-buttons" $}}</p>
{{if .LastError}}<h3>Last error</h3><pre id="last-error">{{.LastError}}</pre>{{end}}
<h3>Payload</h3><pre id="payload">{{.Payload}}</pre>{{if .PayloadCut}}<p class="meta" id="payload-cut">cut to its first bytes: {{.PayloadSize}} bytes in all</p>{{end}}
{{end}}{{end}}
{{end}}

{{define "job"}}{{template "head" .Base}}{{template "job-content" .}}{{template "foot"}}{{end}}
`

// jobButtonsData is what the job-buttons template needs for a row of a list.
type jobButtonsData struct {
	Table   string
	Job     InboxJob
	Actions bool
	Cancel  bool
}

func jobButtons(d jobsPageData, j InboxJob) jobButtonsData {
	return jobButtonsData{Table: d.Table, Job: j, Actions: d.Actions, Cancel: d.Cancel}
}
