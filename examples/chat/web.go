package chat

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

//go:embed page.html
var pageHTML []byte

func (s *Service) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(pageHTML)
	})
	mux.HandleFunc("GET /ws", s.serveWS)
	mux.HandleFunc("GET /api/online", s.serveDirectory)
}

// serveDirectory answers the users online and the rooms as JSON, for a
// page whose visitor has not connected yet.
func (s *Service) serveDirectory(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	d, err := s.Directory(ctx)
	if err != nil {
		http.Error(w, "the chat is restarting: try again", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(d)
}

// netConnKey is where the HTTP server puts the connection of a request in
// its context (a *deadlineConn).
type netConnKey struct{}

// serveWS upgrades to a WebSocket and hands it to a connection process,
// which owns it from then on (the connection is hijacked: the handler
// returns at once).
func (s *Service) serveWS(w http.ResponseWriter, r *http.Request) {
	nc, ok := r.Context().Value(netConnKey{}).(*deadlineConn)
	if !ok {
		http.Error(w, "no connection", http.StatusInternalServerError)
		return
	}
	if !s.admit() {
		http.Error(w, "too many connections", http.StatusServiceUnavailable)
		return
	}
	var ws *webSocketWire
	// Pings and pongs between messages make the connection idle again: they
	// are not the start of a message that must complete.
	control := func() {
		if ws != nil && !ws.inMessage.Load() {
			ws.idle()
		}
	}
	c, err := websocket.Accept(hijackWriter{w, nc}, r, &websocket.AcceptOptions{
		OnPingReceived: func(context.Context, []byte) bool { control(); return true },
		OnPongReceived: func(context.Context, []byte) { control() },
	})
	if err != nil {
		s.conns.Add(-1)
		return // Accept has answered the client
	}
	ws = newWebSocketWire(c, nc, s.deadlines())
	s.startSession(ws)
}
