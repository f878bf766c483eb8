// Command outpost is the Outpost control plane, worker, remote and
// command-line client in one binary. Run `outpost --help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/outpost-sh/outpost/internal/dist"
)

func main() {
	if code, ok := runAsService(argsOf(os.Args)); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a graceful stop, a second one kills.
	context.AfterFunc(ctx, stop)
	code := Main(ctx, argsOf(os.Args), NewSystemFactory())
	stop()
	os.Exit(code)
}

// argsOf returns the command-line arguments of argv: invoked as
// devin-remote (a symlink, or a build downloaded from a /dist/ layout),
// outpost behaves as `outpost remote`, so `devin-remote serve` is
// `outpost remote serve`.
func argsOf(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	if dist.IsRemoteName(argv[0]) {
		return append([]string{"remote"}, argv[1:]...)
	}
	return argv[1:]
}
