package worker

import (
	"context"
	"os"
	"runtime"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/doctor"
	"github.com/outpost-sh/outpost/internal/machine"
)

// ProbeSandbox makes the test sandbox that a worker with workspace dir
// and data dir dataDir makes at start under --isolation auto, as this
// process's user, and says what it found. `outpost doctor` reports it.
func ProbeSandbox(ctx context.Context, dir, dataDir string) doctor.Sandbox {
	if runtime.GOOS != "linux" {
		return doctor.Sandbox{NotUsed: errNoBwrapHere.Error()}
	}
	iso := &isolation{dir: dir, hide: []string{dataDir}}
	if iso.hostname, _ = os.Hostname(); iso.hostname == "" {
		iso.hostname = "outpost"
	}
	err := iso.probeBwrap(ctx, "")
	return doctor.Sandbox{Bwrap: iso.bwrap, Err: err}
}

// logChecks logs the machine checks of `outpost doctor` in short, from
// what the worker detected at start (caps as sessions see them): one line
// with every check's status, and a warning naming the failed ones.
func (w *worker) logChecks(ctx context.Context, caps api.Capabilities) {
	m := doctor.Machine{Caps: caps, Extras: machine.DetectExtras(ctx), Dir: w.opts.Dir}
	if w.iso != nil {
		m.Sandbox = w.iso.probe
	}
	m.Network.Err = w.netErr
	m.Desktop.Off = w.desktop == desktopNone && w.opts.Desktop == DesktopOff
	checks := doctor.MachineChecks(m)
	w.log.Info("machine checks ('outpost doctor' explains each)", doctor.Summary(checks)...)
	if failed := doctor.Failures(checks); len(failed) > 0 {
		w.log.Warn("machine checks failed", "failed", strings.Join(failed, "; "))
	}
}
