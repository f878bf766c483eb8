//go:build unix

package fleetsim

import (
	"fmt"
	"syscall"
)

// checkFiles makes sure the process may open n connections (Go raises
// the soft limit to the hard one at start on Linux; this raises it
// elsewhere) and says what to do when it may not: raise the limit, or
// split the fleet over several simulators, which a hard limit the user
// may not raise leaves as the only way.
func checkFiles(n int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return nil
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	if want := uint64(n) + 256; l.Cur < want {
		return fmt.Errorf("this process may open %d files (hard limit %d) and the simulation needs about %d (three a worker, two a session, one a follower): raise the limit (ulimit -n %d), or run several simulators at once, each with a share of --workers and --sessions", l.Cur, l.Max, want, want)
	}
	return nil
}

// processCPU is this process's CPU time (user and system) in seconds.
func processCPU() (float64, bool) {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0, false
	}
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return sec(u.Utime) + sec(u.Stime), true
}
