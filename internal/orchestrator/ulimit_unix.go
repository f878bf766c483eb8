//go:build unix

package orchestrator

import (
	"os"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"
)

// withDefaultUlimits adds nofile and nproc at this process's own limits
// unless set: container runtimes default to limits (Podman: a million open
// files) that a host with lower hard limits refuses.
func withDefaultUlimits(set []*container.Ulimit) []*container.Ulimit {
	out := append([]*container.Ulimit{}, set...)
	has := func(name string) bool {
		for _, u := range set {
			if u.Name == name {
				return true
			}
		}
		return false
	}
	for _, d := range []struct {
		name string
		res  int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"nproc", unix.RLIMIT_NPROC}} {
		var rl unix.Rlimit
		if has(d.name) || unix.Getrlimit(d.res, &rl) != nil || rl.Cur == unix.RLIM_INFINITY {
			continue
		}
		if rl.Max == unix.RLIM_INFINITY {
			rl.Max = rl.Cur
		}
		if d.name == "nproc" {
			// Some kernels refuse an nproc limit above pid_max in a
			// container even when the host's own limit is higher.
			if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
				if pm, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && pm > 0 {
					rl.Cur, rl.Max = min(rl.Cur, pm), min(rl.Max, pm)
				}
			}
		}
		out = append(out, &container.Ulimit{Name: d.name, Soft: int64(rl.Cur), Hard: int64(rl.Max)})
	}
	return out
}
