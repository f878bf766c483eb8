// Package servertest starts a real Outpost server in a test's process, on
// loopback, for the tests of the packages that talk to one (client, fleet,
// orchestrator, operator, the CLI, benchmarks). internal/server's own
// tests cannot use it: they are inside the package it imports.
package servertest

import (
	"context"
	"io"
	"log/slog"
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
	opts.Listen = "127.0.0.1:0"
	if opts.DataDir == "" {
		opts.DataDir = tb.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, opts)
	if err != nil {
		cancel()
		tb.Fatalf("new server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	c, err := client.New(srv.URL(), srv.AdminToken())
	if err != nil {
		tb.Fatalf("client: %v", err)
	}
	return &Server{Server: srv, Client: c}
}
