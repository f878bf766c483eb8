// Package servertest starts a real Outpost server in a test's process, on
// loopback, for the tests of the packages that talk to one (client, fleet,
// orchestrator, operator, the CLI, benchmarks). internal/server's own
// tests cannot use it: they are inside the package it imports.
package servertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
)

// Server is a server started by Start; it stops when the test ends. Its
// URL and AdminToken are the embedded server's.
type Server struct {
	*server.Server
	// Client is a client of the server with the admin token. It trusts
	// the system's roots only: a test of a TLS server makes its own.
	Client *client.Client
}

// Start starts a server with opts on a free loopback port and serves it
// until the test ends; then it stops the server and fails the test if
// serving returned an error. Listen is always 127.0.0.1:0; an empty
// DataDir is a temporary directory; a nil Logger or Stdout discards.
func Start(tb testing.TB, opts server.Options) *Server {
	tb.Helper()
	if opts.DataDir == "" {
		opts.DataDir = tb.TempDir()
	}
	srv, stop, err := Serve(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	c, err := client.New(srv.URL(), srv.AdminToken())
	if err != nil {
		tb.Fatalf("client: %v", err)
	}
	return &Server{Server: srv, Client: c}
}

// Serve starts a server with opts as Start does, DataDir required, and
// serves it until stop is called; stop returns what serving returned, each
// time it is called. It is
// for callers that are no testing.TB (a test script) or that stop the
// server before their test ends (a benchmark's iterations).
func Serve(opts server.Options) (srv *server.Server, stop func() error, err error) {
	if opts.DataDir == "" {
		return nil, nil, errors.New("servertest: no DataDir")
	}
	opts.Listen = "127.0.0.1:0"
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err = server.New(ctx, opts)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("new server: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	// Once: a second stop returns the first's answer instead of waiting
	// for a Serve that already returned.
	return srv, sync.OnceValue(func() error {
		cancel()
		return <-done
	}), nil
}
