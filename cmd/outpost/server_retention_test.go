package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestServerArtifactRetention(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) (*ServerOptions, error) {
		var got *ServerOptions
		tf := newTestFactory(t, env)
		cmd := NewCmdServer(tf.Factory, func(_ context.Context, o *ServerOptions) error { got = o; return nil })
		cmd.SetArgs(args)
		err := cmd.Execute()
		return got, err
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want time.Duration
	}{
		{name: "default 30 days", want: 720 * time.Hour},
		{name: "flag", args: []string{"--artifact-retention", "168h"}, want: 168 * time.Hour},
		{name: "flag 0 keeps forever", args: []string{"--artifact-retention", "0"}, want: 0},
		{name: "env", env: map[string]string{"OUTPOST_ARTIFACT_RETENTION": "48h"}, want: 48 * time.Hour},
		{name: "env 0", env: map[string]string{"OUTPOST_ARTIFACT_RETENTION": "0"}, want: 0},
		{name: "flag beats env", env: map[string]string{"OUTPOST_ARTIFACT_RETENTION": "48h"},
			args: []string{"--artifact-retention", "2h"}, want: 2 * time.Hour},
	} {
		o, err := parse(tc.env, tc.args...)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if o.ArtifactRetention != tc.want {
			t.Errorf("%s: retention %s, want %s", tc.name, o.ArtifactRetention, tc.want)
		}
	}

	// Bad values are usage errors: exit 2 with a message, no server.
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "negative flag", args: []string{"--artifact-retention", "-1h"}, want: "--artifact-retention must not be negative"},
		{name: "unparsable flag", args: []string{"--artifact-retention", "30 days"}, want: "artifact-retention"},
		{name: "negative env", env: map[string]string{"OUTPOST_ARTIFACT_RETENTION": "-5m"}, want: "--artifact-retention must not be negative"},
		{name: "unparsable env", env: map[string]string{"OUTPOST_ARTIFACT_RETENTION": "30d"}, want: `OUTPOST_ARTIFACT_RETENTION="30d" is not a duration`},
	} {
		tf := newTestFactory(t, tc.env)
		args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		if code := tf.run(t, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", tc.name, code, tf.errOut)
		}
		if !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("%s: stderr %q lacks %q", tc.name, tf.errOut, tc.want)
		}
	}
}

// --ended-entry-retention: a duration, 0 deleting at once; bad values are
// usage errors.
func TestServerEndedEntryRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "negative flag", args: []string{"--ended-entry-retention", "-1m"}, want: "--ended-entry-retention must not be negative"},
		{name: "negative env", env: map[string]string{"OUTPOST_ENDED_ENTRY_RETENTION": "-5m"}, want: "--ended-entry-retention must not be negative"},
		{name: "unparsable env", env: map[string]string{"OUTPOST_ENDED_ENTRY_RETENTION": "ten"}, want: `OUTPOST_ENDED_ENTRY_RETENTION="ten" is not a duration`},
	} {
		tf := newTestFactory(t, tc.env)
		args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		if code := tf.run(t, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", tc.name, code, tf.errOut)
		}
		if !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("%s: stderr %q lacks %q", tc.name, tf.errOut, tc.want)
		}
	}
	o, _, err := parseServer(t, nil, "--ended-entry-retention", "0")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.serverOptions().EndedEntryRetention; got >= 0 {
		t.Errorf("--ended-entry-retention 0 reaches the server as %s, want a negative (delete at once)", got)
	}
}
