package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
)

// The profiling listener serves Go's runtime profiles (net/http/pprof) on
// an address of its own, never on the API listener: a profile shows
// memory and goroutine stacks, and a CPU profile costs the server while it
// runs, so it is for the operator's eyes only. It asks for no token; the
// address must stay private (loopback, or a network only operators reach).

// pprofListen opens the profiling listener on addr; the caller closes it.
func (s *Server) pprofListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: listen for profiling on %s: %w", addr, err)
	}
	s.pprofLn = ln
	s.pprofHTTP = s.newHTTPServer(pprofRoutes())
	return nil
}

// pprofRoutes is the handler of the profiling listener: /debug/pprof/ and
// its profiles, nothing else.
func pprofRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // the named profiles: heap, goroutine, allocs, block, mutex, …
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// servePprof serves the profiling listener until it is shut down; it
// closes done when it returns.
func (s *Server) servePprof(done chan<- struct{}) {
	defer close(done)
	if err := s.pprofHTTP.Serve(s.pprofLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("profiling listener failed", "addr", s.opts.PprofListen, "err", err)
	}
}

// isLoopbackAddr says whether a listen address binds to loopback only.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
