package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestLoggerJSON: with json every line is one JSON object with the time,
// level, message and attributes; with text it is key=value.
func TestLoggerJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := newLogger(&buf, "debug", "json")
	log.Debug("claimed session", "session", "ses_1", "attempt", 2)
	log.With("component", "worker").Warn("renew failed", "err", "boom")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", buf.String())
	}
	for i, want := range []map[string]any{
		{"level": "DEBUG", "msg": "claimed session", "session": "ses_1", "attempt": float64(2)},
		{"level": "WARN", "msg": "renew failed", "component": "worker", "err": "boom"},
	} {
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("line %d %q is not JSON: %v", i+1, lines[i], err)
		}
		if _, ok := got["time"]; !ok {
			t.Errorf("line %d has no time: %q", i+1, lines[i])
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i+1, k, got[k], v)
			}
		}
	}

	buf.Reset()
	newLogger(&buf, "info", "text").Debug("hidden")
	newLogger(&buf, "info", "text").Info("shown", "k", "v")
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `level=INFO msg=shown k=v`) {
		t.Errorf("text log %q", got)
	}
}

// TestResolveLog: OUTPOST_LOG_LEVEL and OUTPOST_LOG_FORMAT fill the flags
// not given; bad values are usage errors.
func TestResolveLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args               []string
		env                map[string]string
		wantLevel, wantFmt string
		wantErr            string
	}{
		{wantLevel: "info", wantFmt: "text"},
		{env: map[string]string{envLogFormat.Name: "json", envLogLevel.Name: "debug"}, wantLevel: "debug", wantFmt: "json"},
		{args: []string{"--log-format", "text"}, env: map[string]string{envLogFormat.Name: "json"}, wantLevel: "info", wantFmt: "text"},
		{args: []string{"--log-format", "xml"}, wantErr: "--log-format must be text or json"},
		{env: map[string]string{envLogLevel.Name: "loud"}, wantErr: "--log-level must be"},
	} {
		fl := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var level, format string
		addLogFlags(fl, &level, &format)
		if err := fl.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := resolveLog(fl, func(k string) string { return tc.env[k] }, &level, &format)
		switch {
		case tc.wantErr != "":
			if !isUsage(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v %v: error %v, want %q", tc.args, tc.env, err, tc.wantErr)
			}
		case err != nil || level != tc.wantLevel || format != tc.wantFmt:
			t.Errorf("%v %v: %q %q %v, want %q %q", tc.args, tc.env, level, format, err, tc.wantLevel, tc.wantFmt)
		}
	}
}
