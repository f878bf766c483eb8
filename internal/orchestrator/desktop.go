package orchestrator

import "github.com/outpost-sh/outpost/internal/desktop"

// givesDesktop reports whether the orchestrator's machines can give a
// session a desktop, so that it may be handed the sessions of an outpost
// whose desktop is enabled. The process and bwrap backends run remotes on
// this host, which has Xvfb or not; what a container image or an exec
// command's machine holds is unknown here, and an unknown is a no, as a
// session that must have a desktop is better left for a machine that
// surely has one.
func (o *orchestrator) givesDesktop() bool {
	switch o.opts.Backend.Name() {
	case "process", "bwrap":
		return desktop.XvfbPath() != ""
	}
	return false
}
