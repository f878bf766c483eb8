package remote

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// desktopDisplay returns the X display to record, when desktop recording
// is on: api.EnvDesktop set to "true", with a DISPLAY.
func desktopDisplay() (string, bool) {
	d := os.Getenv("DISPLAY")
	return d, api.EnvDesktop.Get(os.Getenv) == "true" && d != ""
}

// desktopRecording is ffmpeg grabbing an X display into a file.
type desktopRecording struct {
	path, contentType string
	cmd               *exec.Cmd
	stdin             io.WriteCloser
	stderr            *tailBuffer
	started           time.Time
	exited            chan error
}

// startDesktopRecording starts ffmpeg's x11grab on display.
func startDesktopRecording(c *callEnv, display, path string) (any, error) {
	h := c.browser
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rec != nil || h.desk != nil {
		return nil, errors.New("a recording is already running; stop it with record_stop first")
	}
	args, ctype, err := ffmpegArgs(path)
	if err != nil {
		return nil, err
	}
	// Replace the image pipe input with the display.
	in := []string{"-hide_banner", "-loglevel", "error", "-y", "-f", "x11grab", "-framerate", strconv.Itoa(recordFPS), "-i", display}
	out := args[indexOf(args, "-vf"):]
	r := &desktopRecording{path: path, contentType: ctype, stderr: &tailBuffer{}, exited: make(chan error, 1)}
	r.cmd = exec.Command("ffmpeg", append(in, out...)...)
	r.cmd.Env = c.env // XAUTHORITY with the display's cookie
	r.cmd.Stderr = tailWriter{r.stderr}
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("record the display: %w", err)
	}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("record the display: start ffmpeg: %w", err)
	}
	r.started = time.Now()
	go func() { r.exited <- r.cmd.Wait() }()
	select {
	case err := <-r.exited: // refused at once: no such display, no x11grab
		return nil, fmt.Errorf("record the display %s: ffmpeg exited: %v: %s", display, err, strings.TrimSpace(r.stderr.String()))
	case <-time.After(300 * time.Millisecond):
	}
	h.desk = r
	return api.RecordStartResult{Path: path}, nil
}

func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return len(args)
}

// stop asks ffmpeg to finish the file (q on its standard input) and waits.
func (r *desktopRecording) stop() (api.BrowserFileResult, error) {
	_, _ = io.WriteString(r.stdin, "q")
	_ = r.stdin.Close()
	select {
	case err := <-r.exited:
		if err != nil {
			return api.BrowserFileResult{}, fmt.Errorf("ffmpeg: %w: %s", err, strings.TrimSpace(r.stderr.String()))
		}
	case <-time.After(recordFinishTimeout):
		_ = r.cmd.Process.Kill()
		return api.BrowserFileResult{}, errors.New("ffmpeg did not finish the recording in time")
	}
	fi, err := os.Stat(r.path)
	if err != nil {
		return api.BrowserFileResult{}, fmt.Errorf("the recording: %w", err)
	}
	return api.BrowserFileResult{Path: r.path, Size: fi.Size(), ContentType: r.contentType,
		DurationMS: time.Since(r.started).Milliseconds()}, nil
}
