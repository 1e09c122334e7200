package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserPage checks the chat page's manners in headless Chromium: a
// viewport for phones and a label for every input; a visitor who has not
// connected sees who is online and the rooms; joining a room shows its
// earlier messages; messages show their time; a joined room has a leave
// button that leaves it; a SAY to a room not joined says so.
func TestBrowserPage(t *testing.T) {
	chromium(t)
	p := startProgram(t, "-data", t.TempDir())
	page := "http://" + p.http + "/"

	// Two TCP users are online, and ana has spoken in the lobby.
	ana := dialLine(t, p.tcp)
	ana.expect("CONNECT ana", "OK")
	ana.expect("JOIN lobby", "OK")
	ana.expect("SAY lobby welcome, whoever comes next", "OK")
	if got := ana.line(); got != "ROOM lobby ana welcome, whoever comes next" {
		t.Fatalf("ana got %q", got)
	}
	bob := dialLine(t, p.tcp)
	bob.expect("CONNECT bob", "OK")

	ctx := browser(t)
	runActions(t, ctx, "open the page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`#name`)))

	if v := eval[string](t, ctx, `(document.querySelector('meta[name=viewport]') || {}).content || ''`); !strings.Contains(v, "width=device-width") {
		t.Errorf("viewport meta = %q, want width=device-width", v)
	}
	unlabelled := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('input')).filter(i => !i.labels || i.labels.length === 0).map(i => i.id)`)
	if len(unlabelled) != 0 {
		t.Errorf("inputs without a label: %q", unlabelled)
	}

	// Before connecting: the directory is there.
	runActions(t, ctx, "a visitor sees users and rooms",
		waitJS(`Array.from(document.querySelectorAll('#online li')).map(li => li.textContent).join(',') === 'ana,bob'`),
		waitJS(`Array.from(document.querySelectorAll('#rooms li')).map(li => li.dataset.room + ' ' + li.textContent).join(',') === 'lobby #lobby (1)'`),
	)

	connectT := time.Now()
	runActions(t, ctx, "connect as carol",
		chromedp.SendKeys(chromedp.CSS(`#name`), "carol"),
		chromedp.Click(chromedp.CSS(`#connect button`)),
		waitJS(logHas("connected as carol")),
		chromedp.SetValue(chromedp.CSS(`#to`), "#lobby"),
		chromedp.SendKeys(chromedp.CSS(`#text`), "hello?"),
		chromedp.Click(chromedp.CSS(`#send button`)),
		waitJS(logHas("join #lobby first")),
		chromedp.SendKeys(chromedp.CSS(`#room`), "lobby"),
		chromedp.Click(chromedp.CSS(`#join button`)),
		waitJS(logHas("joined #lobby, earlier messages:")),
		waitJS(logHas("#lobby ana: welcome, whoever comes next")),
		waitJS(`document.querySelector('#rooms li[data-room=lobby] button.leave') !== null`),
		waitJS(`document.querySelector('#rooms li[data-room=lobby]').textContent.startsWith('#lobby (2)')`),
	)

	// Every message line shows a time, the server's for messages.
	ana.expect("SAY lobby and now, live", "OK")
	ana.line() // her own ROOM line
	runActions(t, ctx, "a live room message", waitJS(logHas("#lobby ana: and now, live")))
	bob.expect("SEND carol psst", "SENT carol")
	runActions(t, ctx, "a direct message", waitJS(logHas("bob: psst")))
	times := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#log div')).map(d => { const t = d.querySelector('time'); return t ? t.dateTime + ' ' + t.textContent : ''; })`)
	for i, tm := range times {
		iso, shown, ok := strings.Cut(tm, " ")
		at, err := time.Parse(time.RFC3339Nano, iso)
		if !ok || err != nil || shown == "" {
			t.Fatalf("log line %d has no time: %q", i, tm)
		}
		if at.Before(connectT.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Errorf("log line %d has time %v, far from now", i, at)
		}
	}
	if len(times) < 5 {
		t.Fatalf("only %d log lines: %q", len(times), times)
	}

	// Leave: the button leaves the room, and the page says so.
	runActions(t, ctx, "leave the lobby",
		chromedp.Click(chromedp.CSS(`#rooms li[data-room=lobby] button.leave`)),
		waitJS(logHas("left #lobby")),
		waitJS(`document.querySelector('#rooms li[data-room=lobby] button.leave') === null`),
	)
	ana.expect("SAY lobby still there?", "OK")
	ana.line()
	bob.expect("SEND carol after leaving", "SENT carol")
	runActions(t, ctx, "after leaving, room messages stop", waitJS(logHas("bob: after leaving")))
	if eval[bool](t, ctx, logHas("#lobby ana: still there?")) {
		t.Fatal("carol's page got a room message after she left")
	}
	errs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#log .err .text')).map(d => d.textContent)`)
	if fmt.Sprint(errs) != "[join #lobby first]" {
		t.Errorf("errors shown %q, want only the hint to join", errs)
	}
}
