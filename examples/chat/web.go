package chat

import (
	_ "embed"
	"net/http"

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
