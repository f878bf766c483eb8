package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
)

func TestServerDatabase(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) (*ServerOptions, error) {
		var got *ServerOptions
		tf := newTestFactory(t, env)
		cmd := NewCmdServer(tf.Factory, func(_ context.Context, o *ServerOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		err := cmd.Execute()
		return got, err
	}
	const pg = "postgres://outpost:pw@db:5432/outpost"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "default SQLite", want: ""},
		{name: "flag", args: []string{"--database", pg}, want: pg},
		{name: "postgresql scheme", args: []string{"--database", "postgresql://db/x"}, want: "postgresql://db/x"},
		{name: "env", env: map[string]string{"OUTPOST_DATABASE_URL": pg}, want: pg},
		{name: "flag beats env", env: map[string]string{"OUTPOST_DATABASE_URL": "postgres://other/db"},
			args: []string{"--database", pg}, want: pg},
	} {
		o, err := parse(tc.env, tc.args...)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if o.DatabaseURL != tc.want {
			t.Errorf("%s: database %q, want %q", tc.name, o.DatabaseURL, tc.want)
		}
	}

	// Not a PostgreSQL URL: a usage error that does not echo the URL.
	for _, bad := range []string{"mysql://u:hunter2@db/x", "/var/lib/outpost.db"} {
		tf := newTestFactory(t, nil)
		code := tf.run(t, "server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--database", bad)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", bad, code, tf.errOut)
		}
		if msg := tf.errOut.String(); !strings.Contains(msg, "postgres://") || strings.Contains(msg, "hunter2") {
			t.Errorf("%s: stderr %q", bad, msg)
		}
	}
}

// TestServerDatabaseUnreachable: a server whose database does not answer
// fails to start, naming the host and port and the driver's reason but not
// the password.
func TestServerDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tf := newTestFactory(t, nil)
	url := fmt.Sprintf("postgres://outpost:hunter2@127.0.0.1:%d/outpost?sslmode=disable&connect_timeout=5", port)
	if code := tf.run(t, "server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--database", url); code == 0 {
		t.Fatal("server started without its database")
	}
	msg := tf.errOut.String()
	for _, want := range []string{fmt.Sprintf("127.0.0.1:%d", port), "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("stderr shows the password: %q", msg)
	}
}
