package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]float64{"1/s": 1, "2": 2, "30/m": 0.5, "0.5/s": 0.5, "3600/h": 1} {
		if got, err := parseRate("--call-rate", v); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "0", "-1/s", "1/d", "fast"} {
		if _, err := parseRate("--call-rate", v); err == nil || !strings.Contains(err.Error(), "--call-rate") {
			t.Errorf("parseRate(%q) = %v, want an error naming the flag", v, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{"4096": 4096, "4KiB": 4096, "4K": 4096, "1MiB": 1 << 20, "0": 0, "10B": 10, "2KB": 2000} {
		if got, err := parseSize("--output", v); err != nil || got != want {
			t.Errorf("parseSize(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "-1", "4GiB", "65MiB", "lots"} {
		if _, err := parseSize("--output", v); err == nil || !strings.Contains(err.Error(), "--output") {
			t.Errorf("parseSize(%q) = %v, want an error naming the flag", v, err)
		}
	}
}

// TestBenchFleetRefusesBadFlags: every refusal is a usage error (exit 2)
// with a sentence naming the flag, before anything is started.
func TestBenchFleetRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--database", "postgres://x"}, "--database needs --local"},
		{[]string{"--pprof-listen", "127.0.0.1:6060"}, "--pprof-listen needs --local"},
		{[]string{"--local", "--server", "http://127.0.0.1:1"}, "not both"},
		{[]string{"--call-rate", "often"}, "--call-rate"},
		{[]string{"--output", "huge"}, "--output"},
		{[]string{"--frame", "0"}, "--frame"},
		{[]string{"--server", "http://127.0.0.1:1"}, "admin token is required"},
		{[]string{"--local", "--replicas", "2"}, "--replicas 2 needs --database postgres://"},
		{[]string{"--local", "--replicas", "3", "--database", "/tmp/outpost.db"}, "--replicas 3 needs --database postgres://"},
		{[]string{"--local", "--replicas", "0"}, "--replicas must be at least 1"},
		{[]string{"--replicas", "2", "--server", "http://127.0.0.1:1", "--token", "t"}, "--replicas needs --local"},
		{[]string{"--server", "http://127.0.0.1:1,127.0.0.1:2", "--token", "t"}, `--server "127.0.0.1:2"`},
		{[]string{"--server", " , ", "--token", "t"}, "--server is empty"},
		{[]string{"--metrics-url", "nowhere", "--server", "http://127.0.0.1:1", "--token", "t"}, "--metrics-url"},
		{[]string{"--local", "--ca-file", "ca.pem"}, "--ca-file is for an https --server"},
		// Refused before --local starts a server.
		{[]string{"--local", "--workers", "0"}, "--workers 0: give at least 1"},
		{[]string{"--local", "--workers", "-5"}, "--workers -5"},
		{[]string{"--local", "--followers", "-1"}, "must not be negative"},
		{[]string{"--local", "--workers", "10", "--sessions", "100"}, "--sessions 100 is more than --workers 10"},
		{[]string{"--local", "--duration", "0s"}, "must be positive durations"},
		{[]string{"--local", "--drain", "-1s"}, "must be positive durations"},
		{[]string{"--local", "--workers-per-token", "0"}, "--workers-per-token 0"},
		{[]string{"--local", "--reconnect-every", "-1s"}, "must not be negative"},
		{[]string{"--server", "http://127.0.0.1:1,http://127.0.0.1:1/", "--token", "t"}, "--server names http://127.0.0.1:1 twice"},
		{[]string{"--metrics-url", "http://127.0.0.1:2,http://127.0.0.1:2", "--server", "http://127.0.0.1:1", "--token", "t"}, "--metrics-url names http://127.0.0.1:2 twice"},
	} {
		tf := newTestFactory(t, nil)
		code := tf.run(t, append([]string{"bench", "fleet"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("bench fleet %v: exit %d, %q; want exit %d and %q", tc.args, code, tf.errOut.String(), exitUsage, tc.want)
		}
	}
}

// TestBenchFleetRefusesBadCAFile: a CA file that cannot be read, or holds
// no certificate, stops the command before any request, saying which
// file and where it came from.
func TestBenchFleetRefusesBadCAFile(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for file, want := range map[string]string{missing: "cannot be read", empty: "holds no PEM certificate"} {
		tf := newTestFactory(t, nil)
		// Port 1 refuses connections: an attempt to reach it would fail
		// with another message.
		code := tf.run(t, "bench", "fleet", "--server", "https://127.0.0.1:1", "--token", "t", "--ca-file", file)
		msg := tf.errOut.String()
		if code != exitError || !strings.Contains(msg, file) || !strings.Contains(msg, want) || !strings.Contains(msg, "--ca-file") {
			t.Errorf("--ca-file %s: exit %d, %q; want exit 3 naming the file, %q and --ca-file", file, code, msg, want)
		}
	}
}
