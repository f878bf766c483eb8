package remote

import (
	"bytes"
	"strings"
	"testing"
)

// rw is a socket-like standard input: what is read, and what was written.
type rw struct {
	*strings.Reader
	wrote bytes.Buffer
}

func (s *rw) Write(p []byte) (int, error) { return s.wrote.Write(p) }

// TestReadSessionEnv: the handed-over variables are set; the remote says
// "ready" first on a socket; nothing read means no session; anything but
// the spawn contract's variables is refused.
func TestReadSessionEnv(t *testing.T) {
	t.Parallel()
	set := map[string]string{}
	setenv := func(k, v string) error { set[k] = v; return nil }
	in := &rw{Reader: strings.NewReader("OUTPOST_GATEWAY_URL=ws://h/v1/gateway\nOUTPOST_CONNECT_TOKEN=a=b\n\nDEVIN_OUTPOST_SESSION_ID=s1\nOUTPOST_STATE_DIR=/st\n")}
	got, err := ReadSessionEnv(in, setenv)
	if err != nil || !got {
		t.Fatalf("ReadSessionEnv = %v, %v", got, err)
	}
	want := map[string]string{"OUTPOST_GATEWAY_URL": "ws://h/v1/gateway", "OUTPOST_CONNECT_TOKEN": "a=b",
		"DEVIN_OUTPOST_SESSION_ID": "s1", "OUTPOST_STATE_DIR": "/st"}
	if len(set) != len(want) {
		t.Errorf("set %q, want %q", set, want)
	}
	for k, v := range want {
		if set[k] != v {
			t.Errorf("%s = %q, want %q", k, set[k], v)
		}
	}
	if in.wrote.String() != "ready\n" {
		t.Errorf("wrote %q before reading, want ready", in.wrote.String())
	}

	if got, err := ReadSessionEnv(strings.NewReader(""), setenv); got || err != nil {
		t.Errorf("empty input = %v, %v; want no session and no error", got, err)
	}
	for _, bad := range []string{"PATH=/evil\n", "OUTPOST_SESSION_ID\n"} {
		if _, err := ReadSessionEnv(strings.NewReader(bad), setenv); err == nil {
			t.Errorf("ReadSessionEnv(%q) accepted it", bad)
		}
	}
}
