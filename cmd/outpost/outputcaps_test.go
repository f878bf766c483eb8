package main

import (
	"context"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/server"
)

// TestServerOutputCapFlags: the caps on kept output come from the flag,
// then the environment, then the default; 0 is no bound, a negative or
// unreadable value a usage error.
func TestServerOutputCapFlags(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) *ServerOptions {
		t.Helper()
		var got *ServerOptions
		cmd := NewCmdServer(newTestFactory(t, env).Factory, func(_ context.Context, o *ServerOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return got
	}
	if o := parse(nil); o.MaxCallOutputBytes != server.DefaultMaxCallOutputBytes || o.MaxSessionOutputBytes != server.DefaultMaxSessionOutputBytes {
		t.Errorf("defaults: call %d, session %d", o.MaxCallOutputBytes, o.MaxSessionOutputBytes)
	}
	env := map[string]string{"OUTPOST_MAX_CALL_OUTPUT_BYTES": "5000000", "OUTPOST_MAX_SESSION_OUTPUT_BYTES": "0"}
	if o := parse(env); o.MaxCallOutputBytes != 5000000 || o.serverOptions().MaxSessionOutputBytes != -1 {
		t.Errorf("from the environment: call %d, session %d", o.MaxCallOutputBytes, o.MaxSessionOutputBytes)
	}
	if o := parse(env, "--max-call-output-bytes", "7000000"); o.MaxCallOutputBytes != 7000000 {
		t.Errorf("the flag over the environment: call %d", o.MaxCallOutputBytes)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "negative", args: []string{"--max-call-output-bytes", "-1"}, want: "--max-call-output-bytes must not be negative"},
		{name: "not a number", env: map[string]string{"OUTPOST_MAX_SESSION_OUTPUT_BYTES": "1GiB"}, want: "OUTPOST_MAX_SESSION_OUTPUT_BYTES=\"1GiB\" is not a number of bytes"},
	} {
		tf := newTestFactory(t, tc.env)
		args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		if code := tf.run(t, args...); code != 2 || !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", tc.name, code, tf.errOut, tc.want)
		}
	}
}
