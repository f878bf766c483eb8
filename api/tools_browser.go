package api

// Browser and screen-recording tool names. Each session has its own headless
// Chrome, started on the first browser tool and closed when the session ends.
const (
	ToolBrowserNavigate   = "browser_navigate"
	ToolBrowserClick      = "browser_click"
	ToolBrowserType       = "browser_type"
	ToolBrowserPress      = "browser_press"
	ToolBrowserScreenshot = "browser_screenshot"
	ToolBrowserText       = "browser_text"
	ToolBrowserEval       = "browser_eval"
	ToolBrowserConsole    = "browser_console"
	ToolRecordStart       = "record_start"
	ToolRecordStop        = "record_stop"
)

// BrowserNavigateArgs loads a URL in the session's browser.
type BrowserNavigateArgs struct {
	URL string `json:"url" jsonschema:"Absolute URL to load (http, https, file or data)."`
}

// BrowserNavigateResult is what browser_navigate returns.
type BrowserNavigateResult struct {
	URL   string `json:"url"`
	Title string `json:"title"`
}

// BrowserClickArgs clicks an element.
type BrowserClickArgs struct {
	Selector string `json:"selector" jsonschema:"CSS selector of the element to click; the first match is clicked once it is visible."`
}

// BrowserTypeArgs types text into an element.
type BrowserTypeArgs struct {
	Selector string `json:"selector" jsonschema:"CSS selector of the element (an input, textarea or editable element) to type into."`
	Text     string `json:"text" jsonschema:"Text to type, key by key, after what the element already holds."`
}

// BrowserPressArgs presses a key in the focused element.
type BrowserPressArgs struct {
	Key string `json:"key" jsonschema:"Key to press in the focused element: a character or a key name such as Enter, Tab, Escape, Backspace, ArrowDown."`
}

// BrowserScreenshotArgs takes a PNG screenshot.
type BrowserScreenshotArgs struct {
	Name     string `json:"name,omitempty" jsonschema:"Name of the screenshot file (letters, digits, dot, dash, underscore); .png is added when missing. Default screenshot-<time>.png."`
	FullPage bool   `json:"full_page,omitempty" jsonschema:"Capture the whole scrollable page instead of the viewport."`
}

// BrowserFileResult is a file a browser tool produced (a screenshot or a
// recording).
type BrowserFileResult struct {
	// Path is the file on the remote machine, under the session's state dir.
	Path        string `json:"path"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	Width       int    `json:"width,omitempty"`
	Height      int    `json:"height,omitempty"`
	// DurationMS is a recording's length.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Frames is how many frames a recording holds.
	Frames int `json:"frames,omitempty"`
	// Artifact is the file as uploaded to the control plane (download it
	// with GET /v1/sessions/{id}/artifacts/{name}).
	Artifact *ArtifactRef `json:"artifact,omitempty"`
	// ArtifactError says why the upload failed; the file stays at Path.
	ArtifactError string `json:"artifact_error,omitempty"`
}

// BrowserTextArgs reads the readable text of the page or an element.
type BrowserTextArgs struct {
	Selector string `json:"selector,omitempty" jsonschema:"CSS selector of the element whose text to read; empty or absent reads the whole page."`
}

// BrowserTextResult is what browser_text returns.
type BrowserTextResult struct {
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"`
}

// BrowserEvalArgs evaluates JavaScript in the page.
type BrowserEvalArgs struct {
	Expression string `json:"expression" jsonschema:"JavaScript expression evaluated in the page; a promise is awaited. Its value is returned as JSON."`
}

// BrowserConsoleArgs takes no arguments.
type BrowserConsoleArgs struct{}

// BrowserConsoleMessage is one console message or uncaught error.
type BrowserConsoleMessage struct {
	// Level is log, info, warning, error, debug… or "exception" for an
	// uncaught error.
	Level string `json:"level"`
	Text  string `json:"text"`
	URL   string `json:"url,omitempty"`
	Line  int64  `json:"line,omitempty"`
}

// BrowserConsoleResult is what browser_console returns.
type BrowserConsoleResult struct {
	Messages []BrowserConsoleMessage `json:"messages"`
	// Dropped counts messages dropped because too many were collected.
	Dropped int `json:"dropped,omitempty"`
}

// RecordStartArgs starts recording the browser's screen.
type RecordStartArgs struct {
	Name string `json:"name,omitempty" jsonschema:"Name of the recording file (letters, digits, dot, dash, underscore); ending in .webm records WebM, else MP4 (.mp4 is added when missing). Default recording-<time>.mp4."`
}

// RecordStartResult is what record_start returns.
type RecordStartResult struct {
	Path string `json:"path"`
}

// RecordStopArgs takes no arguments.
type RecordStopArgs struct{}
