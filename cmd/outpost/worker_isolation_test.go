package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/sandbox"
	"github.com/outpost-sh/outpost/internal/worker"
)

// TestWorkerStartIsolationFlags: --isolation defaults to auto, takes
// OUTPOST_WORKER_ISOLATION and loses to the flag; the saved login's
// directory is always hidden from sessions; contradictory flags are
// usage errors.
func TestWorkerStartIsolationFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, tf, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--bwrap-ro-bind", dir, "--bwrap-bind", dir+":/cache")
	if err != nil {
		t.Fatal(err)
	}
	iso := o.Isolation
	if iso.Mode != worker.IsolationAuto || !slices.Contains(iso.Hide, filepath.Join(tf.configDir, "outpost")) {
		t.Errorf("default isolation %+v", iso)
	}
	if want := []sandbox.Bind{{Src: dir, Dest: "/cache"}, {Src: dir, Dest: dir, ReadOnly: true}}; !slices.Equal(iso.Binds, want) {
		t.Errorf("binds %+v, want %+v", iso.Binds, want)
	}
	o, _, err = runWorkerStartCmd(t, map[string]string{"OUTPOST_WORKER_ISOLATION": "none"}, "--outpost", "dev")
	if err != nil || o.Isolation.Mode != worker.IsolationNone {
		t.Errorf("OUTPOST_WORKER_ISOLATION=none: %+v %v", o, err)
	}
	o, _, err = runWorkerStartCmd(t, map[string]string{"OUTPOST_WORKER_ISOLATION": "none"}, "--outpost", "dev", "--isolation", "user", "--run-as", "nobody", "--run-as-home", "/srv/home")
	if err != nil || o.Isolation.Mode != worker.IsolationUser || o.Isolation.RunAs != "nobody" || o.Isolation.RunAsHome != "/srv/home" {
		t.Errorf("--isolation user over the environment: %+v %v", o, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--isolation", "chroot"}, `unknown isolation "chroot"`},
		{[]string{"--isolation", "user"}, "needs --run-as"},
		{[]string{"--isolation", "none", "--run-as", "nobody"}, "--run-as needs"},
		{[]string{"--run-as", "nobody", "--run-as-home", "rel"}, "absolute"},
		{[]string{"--isolation", "none", "--bwrap-bind", dir}, "need --isolation bwrap"},
		{[]string{"--bwrap-ro-bind", "relative"}, "SRC must be an absolute path"},
	} {
		_, _, err := runWorkerStartCmd(t, nil, append([]string{"--outpost", "dev"}, tc.args...)...)
		if !isUsage(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
