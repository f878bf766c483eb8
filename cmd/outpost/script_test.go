package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/datadir"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestMain lets the testscript suite run the real outpost command: a
// script's `exec outpost …` runs this test binary as main.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"outpost": main})
}

// TestScripts runs the end-to-end CLI scripts of testdata/script: the real
// command in a process of its own, with a real server where a script asks
// for one with startserver.
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			// The saved login goes to the script's own config dir, and
			// nothing of the developer's environment leaks in.
			home := filepath.Join(e.WorkDir, "home")
			e.Setenv("HOME", home)
			e.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
			e.Setenv("XDG_DATA_HOME", filepath.Join(home, ".local", "share"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"startserver": cmdStartServer,
			"capture":     cmdCapture,
			"exits":       cmdExits,
			"serveremote": cmdServeRemote,
			"waitevent":   cmdWaitEvent,
			"auditsql":    cmdAuditSQL,
			"waithook":    cmdWaitHook,
		},
	})
}

// cmdAuditSQL runs one SQL statement on the database of the server
// startserver started, behind its back, as someone with access to the
// database file could: `auditsql 'UPDATE audit_log …'`.
func cmdAuditSQL(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: auditsql STATEMENT")
	}
	db, err := sql.Open("sqlite", ts.MkAbs(filepath.Join("server-data", datadir.Database))+"?_pragma=busy_timeout(10000)")
	if err != nil {
		ts.Fatalf("open the database: %v", err)
	}
	defer db.Close()
	if _, err := db.Exec(args[0]); err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
}

// cmdStartServer starts a real Outpost server in the test process on a
// free loopback port with a data dir in the script's work dir, and sets
// $OUTPOST_SERVER and $OUTPOST_TOKEN (its admin token) for the rest of the
// script. The server stops when the script ends. With
// -webhook-allow-internal its webhooks may send to loopback.
func cmdStartServer(ts *testscript.TestScript, neg bool, args []string) {
	opts := server.Options{DataDir: ts.MkAbs("server-data")}
	if len(args) == 1 && args[0] == "-webhook-allow-internal" {
		opts.Webhooks = server.WebhookOptions{AllowInternal: true, Poll: 20 * time.Millisecond, FirstRetry: 50 * time.Millisecond, MaxBackoff: time.Second}
		args = nil
	}
	if neg || len(args) != 0 {
		ts.Fatalf("usage: startserver [-webhook-allow-internal]")
	}
	srv, stop, err := servertest.Serve(opts)
	if err != nil {
		ts.Fatalf("start server: %v", err)
	}
	ts.Defer(func() {
		if err := stop(); err != nil {
			ts.Logf("server: %v", err)
		}
	})
	ts.Setenv(api.EnvServer.Name, srv.URL())
	ts.Setenv(api.EnvToken.Name, srv.AdminToken())
}

// cmdCapture sets the environment variable NAME to the last command's
// standard output, trimmed: `capture SESSION` after a command that printed
// a session id.
func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: capture NAME")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
}

// cmdExits runs a program like exec and fails unless it exits with the
// given status: `exits 2 outpost sessions get`. Its output is there for
// stdout and stderr as after exec.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits STATUS PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: status %q is not a number", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// scriptClient is a client of the script's server, as $OUTPOST_SERVER and
// $OUTPOST_TOKEN say.
func scriptClient(ts *testscript.TestScript) *client.Client {
	c, err := client.New(ts.Getenv(api.EnvServer.Name), ts.Getenv(api.EnvToken.Name))
	if err != nil {
		ts.Fatalf("client: %v", err)
	}
	return c
}

// cmdServeRemote claims session ID and serves it with a real remote in the
// test process, in a workspace of the script's work dir, until the script
// ends: `serveremote $SESSION`.
func cmdServeRemote(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: serveremote SESSION")
	}
	ctx, cancel := context.WithCancel(context.Background())
	claim, err := scriptClient(ts).Queue.Claim(ctx, args[0], "script-machine")
	if err != nil {
		cancel()
		ts.Fatalf("claim %s: %v", args[0], err)
	}
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{GatewayURL: claim.Status.GatewayURL, ConnectToken: claim.Status.ConnectToken,
			SessionID: args[0], StateDir: ts.MkAbs("remote-state"), WorkDir: ts.MkAbs("remote-work"),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	ts.Defer(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			ts.Logf("remote: %v", err)
		}
	})
}

// cmdWaitEvent waits up to 15 s for an event of session ID whose JSON
// matches REGEXP: `waitevent $SESSION '"state":"pending"'`.
func cmdWaitEvent(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitevent SESSION REGEXP")
	}
	re, err := regexp.Compile(args[1])
	if err != nil {
		ts.Fatalf("waitevent: %v", err)
	}
	c := scriptClient(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if !waitfor.Poll(ctx, func() bool {
		l, err := c.Sessions.Events(ctx, args[0], 0, 0)
		if err != nil {
			return false
		}
		for _, ev := range l.Items {
			if b, _ := json.Marshal(ev); re.Match(b) {
				return true
			}
		}
		return false
	}) {
		ts.Fatalf("no event of %s matches %s", args[0], args[1])
	}
}

// cmdWaitHook waits (up to 20 s) until the server's first webhook has a
// delivery that was tried, and sets $HOOK and $DELIVERY to their ids.
func cmdWaitHook(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: waithook")
	}
	c, err := client.New(ts.Getenv(api.EnvServer.Name), ts.Getenv(api.EnvToken.Name))
	if err != nil {
		ts.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		l, err := c.Webhooks.List(ctx)
		if err != nil {
			ts.Fatalf("list webhooks: %v", err)
		}
		if len(l.Items) > 0 {
			ds, err := c.Webhooks.Deliveries(ctx, l.Items[0].ID, 0)
			if err != nil {
				ts.Fatalf("deliveries: %v", err)
			}
			for _, d := range ds.Items {
				if d.Attempts > 0 {
					ts.Setenv("HOOK", l.Items[0].ID)
					ts.Setenv("DELIVERY", d.ID)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			ts.Fatalf("no webhook delivery was tried in 20s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
