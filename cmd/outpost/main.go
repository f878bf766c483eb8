// Command outpost is the Outpost control plane, worker, remote and
// command-line client in one binary. Run `outpost --help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a graceful stop, a second one kills.
	context.AfterFunc(ctx, stop)
	code := Main(ctx, os.Args[1:], NewSystemFactory())
	stop()
	os.Exit(code)
}
