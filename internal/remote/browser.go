package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig of screencast frames
	_ "image/png"  // DecodeConfig of screenshots
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

func init() {
	tools[api.ToolBrowserNavigate] = runBrowserNavigate
	tools[api.ToolBrowserClick] = runBrowserClick
	tools[api.ToolBrowserType] = runBrowserType
	tools[api.ToolBrowserPress] = runBrowserPress
	tools[api.ToolBrowserScreenshot] = runBrowserScreenshot
	tools[api.ToolBrowserText] = runBrowserText
	tools[api.ToolBrowserEval] = runBrowserEval
	tools[api.ToolBrowserConsole] = runBrowserConsole
}

const (
	// viewportWidth and viewportHeight are the browser's viewport.
	viewportWidth, viewportHeight = 1280, 800
	// browserStartTimeout bounds Chrome's start.
	browserStartTimeout = 30 * time.Second
	// browserActionTimeout bounds a browser action when the call has no
	// timeout of its own, so a selector that never matches does not hang.
	browserActionTimeout = 60 * time.Second
	// maxConsoleMessages is how many console messages are kept between two
	// browser_console calls.
	maxConsoleMessages = 1000
	// maxBrowserText is the longest text browser_text returns, in runes.
	maxBrowserText = 100_000
)

// browserHost is a session's browser: started by the first browser tool,
// closed when the session ends. Its zero value is ready to use.
type browserHost struct {
	mu     sync.Mutex
	b      *browser
	closed bool
	rec    *recording
	desk   *desktopRecording // a recording of the X display (OUTPOST_DESKTOP)
}

// browser is a running Chrome with one tab.
type browser struct {
	tab    context.Context // chromedp context of the tab
	cancel func()          // closes the tab and the browser

	mu       sync.Mutex
	messages []api.BrowserConsoleMessage
	dropped  int
}

// get returns the session's browser, starting it if needed.
func (h *browserHost) get(c *callEnv) (*browser, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.getLocked(c)
}

func (h *browserHost) getLocked(c *callEnv) (*browser, error) {
	if h.closed {
		return nil, errors.New("the session's browser is closed: the session is ending")
	}
	if h.b != nil && h.b.tab.Err() == nil {
		return h.b, nil
	}
	if h.b != nil {
		// Chrome died or was closed; start a new one.
		c.log.Warn("the browser is gone; starting a new one", "err", context.Cause(h.b.tab))
		h.b.cancel()
		h.b = nil
	}
	b, err := startBrowser(c)
	if err != nil {
		return nil, err
	}
	h.b = b
	return b, nil
}

// close stops a recording and closes the browser, if they run.
func (h *browserHost) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.desk != nil {
		_, _ = h.desk.stop()
		h.desk = nil
	}
	if h.rec != nil {
		_, _ = h.rec.stop()
		h.rec = nil
	}
	if h.b != nil {
		h.b.cancel()
		h.b = nil
	}
}

// errNoChrome explains how to get a browser.
func errNoChrome() error {
	if p, name := api.EnvChromePath.Lookup(os.Getenv); p != "" {
		return fmt.Errorf("no Chrome or Chromium for the browser tools: %s is %q, which is not an existing file; "+
			"point it at a Chrome or Chromium binary, or unset it and install Chromium (e.g. `apt-get install chromium`)",
			name, p)
	}
	return fmt.Errorf("no Chrome or Chromium for the browser tools: none found in PATH (chromium, chromium-browser, google-chrome) "+
		"or the standard locations; install Chromium (e.g. `apt-get install chromium`, or `brew install --cask chromium`) "+
		"or set %s to a Chrome or Chromium binary", api.EnvChromePath)
}

// browserDir returns dir under the session's state dir, created.
func (c *callEnv) browserDir(elem ...string) (string, error) {
	base := c.stateDir
	if base == "" {
		base = filepath.Join(os.TempDir(), "outpost-browser")
	}
	dir := filepath.Join(append([]string{base, "browser"}, elem...)...)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("browser: %w", err)
	}
	return dir, nil
}

func startBrowser(c *callEnv) (*browser, error) {
	path := machine.ChromePath()
	if path == "" {
		return nil, errNoChrome()
	}
	profile, err := c.browserDir("profile")
	if err != nil {
		return nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(profile),

		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(viewportWidth, viewportHeight),
	}
	// On the session's desktop the browser is a window a person (and the
	// computer tool) can see; elsewhere it runs headless.
	if display := envValue(c.env, "DISPLAY"); display != "" && c.desktop != nil && c.desktop.opts != nil {
		opts = append(opts, chromedp.Flag("headless", false), chromedp.Flag("window-position", "0,0"),
			chromedp.Env("DISPLAY="+display, "XAUTHORITY="+envValue(c.env, "XAUTHORITY")))
	} else {
		opts = append(opts, chromedp.Flag("headless", "new"))
	}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	log := c.log
	tab, tabCancel := chromedp.NewContext(allocCtx,
		chromedp.WithLogf(func(f string, a ...any) { log.Debug("chromedp: " + fmt.Sprintf(f, a...)) }),
		chromedp.WithErrorf(func(f string, a ...any) { log.Debug("chromedp error: " + fmt.Sprintf(f, a...)) }),
	)
	b := &browser{tab: tab, cancel: func() {
		// Close the browser gracefully, but not forever.
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		_ = chromedp.Cancel(ctx)
		cancel()
		tabCancel()
		allocCancel()
	}}
	// The first Run starts Chrome and ties it to tab, so it gets no
	// timeout of its own; a stuck start is abandoned by cancelling tab.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(tab, chromedp.EmulateViewport(viewportWidth, viewportHeight)) }()
	select {
	case err = <-started:
	case <-time.After(browserStartTimeout):
		err = fmt.Errorf("it did not answer within %s", browserStartTimeout)
	}
	if err != nil {
		tabCancel()
		allocCancel()
		return nil, fmt.Errorf("start the browser %s: %w", path, err)
	}
	messages := chromedp.Console(tab)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.addConsole(m)
		}
	}()
	c.log.Info("browser started", "chrome", path, "profile", profile)
	return b, nil
}

func (b *browser) addConsole(m chromedp.ConsoleMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.messages) >= maxConsoleMessages {
		b.dropped++
		return
	}
	b.messages = append(b.messages, api.BrowserConsoleMessage{Level: string(m.Type), Text: m.Text, URL: m.URL, Line: m.Line})
}

func (b *browser) takeConsole() api.BrowserConsoleResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := api.BrowserConsoleResult{Messages: b.messages, Dropped: b.dropped}
	if r.Messages == nil {
		r.Messages = []api.BrowserConsoleMessage{}
	}
	b.messages, b.dropped = nil, 0
	return r
}

// actionCtx is a context for running actions on the tab, ending with the
// call's context (and its deadline, or browserActionTimeout).
func (b *browser) actionCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(browserActionTimeout)
	}
	actx, cancel := context.WithDeadline(b.tab, dl)
	stop := context.AfterFunc(ctx, cancel)
	return actx, func() { stop(); cancel() }
}

// do runs actions on the session's browser for a call.
func do(ctx context.Context, c *callEnv, actions ...chromedp.Action[chromedp.Void]) (*browser, error) {
	b, err := c.browser.get(c)
	if err != nil {
		return nil, err
	}
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	if err := chromedp.Do(actx, actions...); err != nil {
		return b, browserErr(ctx, actx, err)
	}
	return b, nil
}

// run runs one action that returns a value on the session's browser.
func run[T any](ctx context.Context, c *callEnv, action chromedp.Action[T]) (T, error) {
	var v T
	_, err := do(ctx, c, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		var err error
		v, err = action(ctx, t)
		return err
	}))
	return v, err
}

// browserErr makes a timeout readable.
func browserErr(callCtx, actx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || (actx.Err() != nil && callCtx.Err() == nil && errors.Is(err, context.Canceled)) {
		return fmt.Errorf("browser: timed out: %w", err)
	}
	return fmt.Errorf("browser: %w", err)
}

func runBrowserNavigate(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserNavigateArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.URL == "" {
		return nil, errors.New("url is required")
	}
	var res api.BrowserNavigateResult
	_, err := do(ctx, c,
		chromedp.Navigate(a.URL),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			var err error
			if res.URL, err = chromedp.Location()(ctx, t); err != nil {
				return err
			}
			res.Title, err = chromedp.Title()(ctx, t)
			return err
		}),
	)
	if err != nil {
		return nil, err
	}
	return res, nil
}

func runBrowserClick(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserClickArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Selector == "" {
		return nil, errors.New("selector is required")
	}
	if _, err := do(ctx, c, chromedp.Click(chromedp.CSS(a.Selector), chromedp.NodeVisible)); err != nil {
		return nil, err
	}
	return nil, nil
}

func runBrowserType(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserTypeArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Selector == "" {
		return nil, errors.New("selector is required")
	}
	if _, err := do(ctx, c, chromedp.SendKeys(chromedp.CSS(a.Selector), a.Text, chromedp.NodeVisible)); err != nil {
		return nil, err
	}
	return nil, nil
}

// keyNames maps key names to chromedp's key runes.
var keyNames = map[string]string{
	"enter": kb.Enter, "return": kb.Enter, "tab": kb.Tab, "escape": kb.Escape, "esc": kb.Escape,
	"backspace": kb.Backspace, "delete": kb.Delete, "space": " ", "insert": kb.Insert,
	"arrowdown": kb.ArrowDown, "arrowup": kb.ArrowUp, "arrowleft": kb.ArrowLeft, "arrowright": kb.ArrowRight,
	"down": kb.ArrowDown, "up": kb.ArrowUp, "left": kb.ArrowLeft, "right": kb.ArrowRight,
	"home": kb.Home, "end": kb.End, "pageup": kb.PageUp, "pagedown": kb.PageDown,
	"f1": kb.F1, "f2": kb.F2, "f3": kb.F3, "f4": kb.F4, "f5": kb.F5, "f6": kb.F6,
	"f7": kb.F7, "f8": kb.F8, "f9": kb.F9, "f10": kb.F10, "f11": kb.F11, "f12": kb.F12,
}

func runBrowserPress(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserPressArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	key := a.Key
	if utf8.RuneCountInString(key) != 1 {
		k, ok := keyNames[strings.ToLower(key)]
		if !ok {
			return nil, fmt.Errorf("unknown key %q: give one character or a key name such as Enter, Tab, Escape, Backspace, Delete, Space, "+
				"ArrowUp, ArrowDown, ArrowLeft, ArrowRight, Home, End, PageUp, PageDown, F1…F12", a.Key)
		}
		key = k
	}
	if _, err := do(ctx, c, chromedp.KeyEvent(key)); err != nil {
		return nil, err
	}
	return nil, nil
}

// fileNameRe is what screenshot and recording names may be.
var fileNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// fileName checks name, defaults it to prefix-<time>.ext and adds ext when
// it has none of exts.
func fileName(name, prefix, ext string, exts ...string) (string, error) {
	if name == "" {
		return prefix + "-" + time.Now().UTC().Format("20060102-150405.000") + ext, nil
	}
	if !fileNameRe.MatchString(name) || len(name) > 200 {
		return "", fmt.Errorf("bad name %q: use letters, digits, dot, dash and underscore, starting with a letter or digit", name)
	}
	lower := strings.ToLower(name)
	for _, e := range append([]string{ext}, exts...) {
		if strings.HasSuffix(lower, e) {
			return name, nil
		}
	}
	return name + ext, nil
}

func runBrowserScreenshot(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserScreenshotArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	name, err := fileName(a.Name, "screenshot", ".png")
	if err != nil {
		return nil, err
	}
	shot := chromedp.CaptureScreenshot()
	if a.FullPage {
		shot = chromedp.FullScreenshot(100)
	}
	data, err := run(ctx, c, shot)
	if err != nil {
		return nil, err
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("browser: the screenshot is not an image: %w", err)
	}
	dir, err := c.browserDir("files")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("browser: save the screenshot: %w", err)
	}
	res := api.BrowserFileResult{Path: path, Size: int64(len(data)), ContentType: "image/png", Width: cfg.Width, Height: cfg.Height}
	res.Artifact, res.ArtifactError = c.keepArtifact(ctx, name, res.ContentType, path)
	return res, nil
}

// textJS returns the readable text of the page or of the element the
// selector (passed as a JSON string) matches.
const textJS = `(() => {
	const sel = %s;
	const el = sel ? document.querySelector(sel) : (document.body || document.documentElement);
	if (!el) { throw new Error("no element matches " + JSON.stringify(sel)); }
	return el.innerText !== undefined ? el.innerText : el.textContent;
})()`

func runBrowserText(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserTextArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	var actions []chromedp.Action[chromedp.Void]
	if a.Selector != "" {
		actions = append(actions, chromedp.WaitReady(chromedp.CSS(a.Selector)))
	}
	sel, _ := json.Marshal(a.Selector)
	var text string
	actions = append(actions, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		var err error
		text, err = chromedp.Evaluate[string](fmt.Sprintf(textJS, sel))(ctx, t)
		return err
	}))
	if _, err := do(ctx, c, actions...); err != nil {
		return nil, err
	}
	res := api.BrowserTextResult{Text: text}
	if utf8.RuneCountInString(text) > maxBrowserText {
		res.Text, res.Truncated = string([]rune(text)[:maxBrowserText]), true
	}
	return res, nil
}

func runBrowserEval(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserEvalArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Expression) == "" {
		return nil, errors.New("expression is required")
	}
	obj, err := run(ctx, c, chromedp.Evaluate[*runtime.RemoteObject](a.Expression,
		chromedp.EvalAwaitPromise, chromedp.EvalAsValue))
	if err != nil {
		return nil, err
	}
	if obj == nil || len(obj.Value) == 0 {
		// undefined, or a value JSON cannot hold (a function, a symbol).
		if obj != nil && obj.Type != "undefined" && obj.Description != "" {
			return mustJSON(obj.Description), nil
		}
		return json.RawMessage("null"), nil
	}
	return json.RawMessage(obj.Value), nil
}

func runBrowserConsole(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.BrowserConsoleArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	b, err := c.browser.get(c)
	if err != nil {
		return nil, err
	}
	return b.takeConsole(), nil
}
