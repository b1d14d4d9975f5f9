// Package fakefault holds the fault switches the fake services of the tests
// (fakegithub, fakekms) share: the whole service down, and requests applied
// whose responses are then lost.
package fakefault

import (
	"net/http"
	"net/http/httptest"
	"sync"
)

// Switches are a fake's fault switches; the zero value has none on. They
// are safe for concurrent use.
type Switches struct {
	mu   sync.Mutex
	down bool
	drop map[string]int // route -> responses left to drop
}

// SetDown makes every request fail (true), each fake the way its service
// fails, or work again (false).
func (s *Switches) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// DropResponses makes the next n requests of route (each fake says what
// its routes are) be applied, and their responses then lost: the
// connection is closed before anything is written.
func (s *Switches) DropResponses(route string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drop == nil {
		s.drop = map[string]int{}
	}
	s.drop[route] = n
}

// Next reads the switches for a request of route: whether the service is
// down, and whether this request's response is to be dropped (which uses
// up one of route's drops, down or not).
func (s *Switches) Next(route string) (down, drop bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	drop = s.drop[route] > 0
	if drop {
		s.drop[route]--
	}
	return s.down, drop
}

// Drop applies a request with serve, then loses the answer: the connection
// is closed before anything is written.
func Drop(w http.ResponseWriter, serve func(http.ResponseWriter)) {
	serve(httptest.NewRecorder())
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}
