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

// serveWS upgrades to a WebSocket and hands it to a connection process,
// which owns it from then on (the connection is hijacked: the handler
// returns at once).
func (s *Service) serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	s.startSession(newWSSession(c))
}
