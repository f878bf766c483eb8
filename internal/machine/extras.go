package machine

import (
	"context"
	"os/exec"
	"sync"
)

// Extras are programs beyond Capabilities that `outpost doctor` and a
// worker's start checks report: a virtual X server for desktop sessions
// and the container engines session code may use. A missing program is an
// empty field.
type Extras struct {
	// Xvfb is the path of Xvfb.
	Xvfb string `json:"xvfb,omitempty"`
	// Podman and Docker are the first lines of `podman --version` and
	// `docker --version`.
	Podman string `json:"podman,omitempty"`
	Docker string `json:"docker,omitempty"`
}

// DetectExtras finds the Extras of this machine. Like Detect it never
// fails, and its probes run at once.
func DetectExtras(ctx context.Context) Extras {
	var e Extras
	if p, err := exec.LookPath("Xvfb"); err == nil {
		e.Xvfb = p
	}
	var wg sync.WaitGroup
	wg.Go(func() { e.Podman = firstLine(probe(ctx, "podman", "--version")) })
	wg.Go(func() { e.Docker = firstLine(probe(ctx, "docker", "--version")) })
	wg.Wait()
	return e
}
