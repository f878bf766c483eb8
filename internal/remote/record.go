package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/loop"
)

func init() {
	tools[api.ToolRecordStart] = runRecordStart
	tools[api.ToolRecordStop] = runRecordStop
}

const (
	// recordFPS is the frame rate of recordings: the latest screencast
	// frame is repeated at this rate, since Chrome sends frames only when
	// the screen changes.
	recordFPS = 10
	// recordFinishTimeout bounds ffmpeg's finishing of the file.
	recordFinishTimeout = 30 * time.Second
)

// recording is a running screen recording: screencast frames of the
// session's browser piped into ffmpeg.
type recording struct {
	path, contentType string
	b                 *browser
	cmd               *exec.Cmd
	stdin             io.WriteCloser
	stderr            *tailBuffer
	cancel            context.CancelFunc // ends the screencast subscription
	done              chan struct{}      // closed when the writer goroutine ends

	mu     sync.Mutex
	latest []byte // latest JPEG frame
	frames int    // frames written to ffmpeg
	werr   error  // first write error
}

// ffmpegEncoders caches `ffmpeg -encoders`.
var ffmpegEncoders = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("ffmpeg", "-hide_banner", "-encoders").Output()
	return string(out), err
})

// errNoFFmpeg explains how to get ffmpeg.
var errNoFFmpeg = errors.New("ffmpeg is required for screen recording but was not found in PATH; install it " +
	"(e.g. `apt-get install ffmpeg`, or `brew install ffmpeg`)")

// ffmpegArgs returns ffmpeg's arguments for writing path from MJPEG frames
// on standard input, and the file's content type.
func ffmpegArgs(path string) ([]string, string, error) {
	enc, err := ffmpegEncoders()
	if err != nil {
		return nil, "", fmt.Errorf("ffmpeg -encoders: %w", err)
	}
	has := func(name string) bool { return strings.Contains(enc, " "+name+" ") }
	args := []string{"-hide_banner", "-loglevel", "error", "-y",
		"-f", "image2pipe", "-c:v", "mjpeg", "-framerate", strconv.Itoa(recordFPS), "-i", "pipe:0",
		"-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2", "-pix_fmt", "yuv420p"}
	var ctype string
	if strings.HasSuffix(strings.ToLower(path), ".webm") {
		ctype = "video/webm"
		switch {
		case has("libvpx-vp9"):
			args = append(args, "-c:v", "libvpx-vp9", "-b:v", "0", "-crf", "40", "-deadline", "realtime", "-cpu-used", "8")
		case has("libvpx"):
			args = append(args, "-c:v", "libvpx", "-b:v", "1M", "-deadline", "realtime", "-cpu-used", "8")
		default:
			return nil, "", errors.New("this ffmpeg has no WebM encoder (libvpx); record MP4 instead (a name ending in .mp4)")
		}
	} else {
		ctype = "video/mp4"
		switch {
		case has("libx264"):
			args = append(args, "-c:v", "libx264", "-preset", "veryfast", "-crf", "28")
		case has("mpeg4"):
			args = append(args, "-c:v", "mpeg4", "-q:v", "5")
		default:
			return nil, "", errors.New("this ffmpeg has neither libx264 nor mpeg4 encoders")
		}
		args = append(args, "-movflags", "+faststart")
	}
	return append(args, path), ctype, nil
}

func runRecordStart(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.RecordStartArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	name, err := fileName(a.Name, "recording", ".mp4", ".webm")
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		return nil, errNoFFmpeg
	}
	dir, err := c.browserDir("files")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	// The session's desktop when it has one running (the call's
	// $DISPLAY), else the browser's screen.
	if display := envValue(c.env, "DISPLAY"); display != "" && c.desktop != nil && c.desktop.opts != nil {
		return startDesktopRecording(c, display, path)
	}
	if display, ok := desktopDisplay(); ok {
		return startDesktopRecording(c, display, path)
	}
	args, ctype, err := ffmpegArgs(path)
	if err != nil {
		return nil, err
	}

	h := c.browser
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rec != nil {
		return nil, fmt.Errorf("a recording is already running (%s); stop it with record_stop first", h.rec.path)
	}
	b, err := h.getLocked(c)
	if err != nil {
		return nil, err
	}
	r, err := startRecording(ctx, b, path, ctype, args)
	if err != nil {
		return nil, err
	}
	h.rec = r
	c.log.Info("recording started", "path", path)
	return api.RecordStartResult{Path: path}, nil
}

func startRecording(ctx context.Context, b *browser, path, ctype string, args []string) (*recording, error) {
	// ffmpeg outlives this call: it is not tied to ctx.
	cmd := exec.Command("ffmpeg", args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stderr := &tailBuffer{}
	cmd.Stderr = tailWriter{stderr}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ffmpeg: %w", err)
	}
	subCtx, cancel := context.WithCancel(b.tab)
	r := &recording{path: path, contentType: ctype, b: b, cmd: cmd, stdin: stdin, stderr: stderr, cancel: cancel, done: make(chan struct{})}
	frames := chromedp.Events(subCtx, page.ScreencastFrame)
	actx, acancel := b.actionCtx(ctx)
	defer acancel()
	q := int64(80)
	_, err = chromedp.Call(actx, page.StartScreencast, page.StartScreencastParams{
		Format: page.StartScreencastFormatJpeg, Quality: &q,
		MaxWidth: viewportWidth, MaxHeight: viewportHeight, EveryNthFrame: 1,
	})
	if err != nil {
		cancel()
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.Remove(path)
		return nil, fmt.Errorf("start the screencast: %w", err)
	}
	// Receive frames and acknowledge them, so Chrome sends more.
	go func() {
		for ev, err := range frames {
			if err != nil {
				return
			}
			r.mu.Lock()
			r.latest = ev.Data
			r.mu.Unlock()
			_, _ = chromedp.Call(subCtx, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: ev.SessionID})
		}
	}()
	// Write the latest frame at a steady rate.
	go func() {
		defer close(r.done)
		loop.Every(subCtx, time.Second/recordFPS, func(context.Context) { r.writeLatest() })
	}()
	return r, nil
}

// writeLatest writes the latest frame, if any, to ffmpeg.
func (r *recording) writeLatest() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.latest == nil || r.werr != nil {
		return
	}
	if _, err := r.stdin.Write(r.latest); err != nil {
		r.werr = err
		return
	}
	r.frames++
}

// stop ends the screencast, lets ffmpeg finish the file and describes it.
func (r *recording) stop() (api.BrowserFileResult, error) {
	ctx, cancel := context.WithTimeout(r.b.tab, 5*time.Second)
	_, _ = chromedp.Call(ctx, page.StopScreencast, cdp.Empty{})
	cancel()
	r.cancel()
	<-r.done
	r.mu.Lock()
	if r.frames == 0 && r.werr == nil {
		// Nothing came from the screencast: record one still frame.
		ctx, cancel := context.WithTimeout(r.b.tab, 10*time.Second)
		if jpg, err := chromedp.Run(ctx, chromedp.FullScreenshot(90)); err == nil {
			r.latest = jpg
		}
		cancel()
	}
	if r.frames == 0 && r.latest != nil && r.werr == nil {
		r.mu.Unlock()
		r.writeLatest()
		r.mu.Lock()
	}
	frames, latest, werr := r.frames, r.latest, r.werr
	r.mu.Unlock()

	_ = r.stdin.Close()
	waitErr := make(chan error, 1)
	go func() { waitErr <- r.cmd.Wait() }()
	var err error
	select {
	case err = <-waitErr:
	case <-time.After(recordFinishTimeout):
		_ = r.cmd.Process.Kill()
		err = fmt.Errorf("ffmpeg did not finish within %s", recordFinishTimeout)
		<-waitErr
	}
	if err != nil {
		return api.BrowserFileResult{}, fmt.Errorf("ffmpeg: %w: %s", err, strings.TrimSpace(r.stderr.String()))
	}
	if frames == 0 {
		return api.BrowserFileResult{}, errors.New("the recording holds no frames: the browser sent none")
	}
	if werr != nil {
		return api.BrowserFileResult{}, fmt.Errorf("write frames to ffmpeg: %w: %s", werr, strings.TrimSpace(r.stderr.String()))
	}
	st, err := os.Stat(r.path)
	if err != nil {
		return api.BrowserFileResult{}, fmt.Errorf("the recording: %w", err)
	}
	res := api.BrowserFileResult{
		Path: r.path, Size: st.Size(), ContentType: r.contentType,
		DurationMS: int64(frames) * 1000 / recordFPS, Frames: frames,
	}
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(latest)); err == nil {
		res.Width, res.Height = cfg.Width, cfg.Height
	}
	return res, nil
}

func runRecordStop(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.RecordStopArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	h := c.browser
	h.mu.Lock()
	r, desk := h.rec, h.desk
	h.rec, h.desk = nil, nil
	h.mu.Unlock()
	var res api.BrowserFileResult
	var err error
	switch {
	case desk != nil:
		res, err = desk.stop()
	case r != nil:
		res, err = r.stop()
	default:
		return nil, errors.New("no recording is running; start one with record_start")
	}
	if err != nil {
		return nil, err
	}
	res.Artifact, res.ArtifactError = c.keepArtifact(ctx, filepath.Base(res.Path), res.ContentType, res.Path)
	c.log.Info("recording stopped", "path", res.Path, "frames", res.Frames)
	return res, nil
}

// tailWriter adapts a tailBuffer to io.Writer.
type tailWriter struct{ t *tailBuffer }

func (w tailWriter) Write(p []byte) (int, error) {
	w.t.Write(p)
	return len(p), nil
}
